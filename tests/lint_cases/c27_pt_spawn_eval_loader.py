"""mp.spawn DDP trainer; the validation loader is unsharded on purpose (rank 0 evaluates alone)."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


def run(rank, world_size, epochs=5):
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    tfm = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_set = datasets.MNIST("data", train=True, download=rank == 0, transform=tfm)
    val_set = datasets.MNIST("data", train=False, transform=tfm)
    train_sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank)
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler, num_workers=4, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False, num_workers=4)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model = DistributedDataParallel(net.cuda(rank), device_ids=[rank])
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for epoch in range(epochs):
        train_sampler.set_epoch(epoch)
        model.train()
        for data, target in train_loader:
            data, target = data.cuda(rank, non_blocking=True), target.cuda(rank, non_blocking=True)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
        if rank == 0:
            model.eval()
            correct = 0
            with torch.no_grad():
                for data, target in val_loader:
                    correct += (model.module(data.cuda(rank)).argmax(1).cpu() == target).sum().item()
            print(f"epoch {epoch}: {correct / len(val_set):.3f}")
            torch.save(model.module.state_dict(), "mnist_ddp.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    mp.spawn(run, args=(n_gpus,), nprocs=n_gpus, join=True)
