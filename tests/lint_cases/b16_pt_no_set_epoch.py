"""DistributedSampler that is never told the epoch."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


def train(args_epochs=10):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    ds = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
    sampler = DistributedSampler(ds, shuffle=True)
    loader = DataLoader(ds, batch_size=128, sampler=sampler, num_workers=4, pin_memory=True)
    model = DDP(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args_epochs):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    train()
