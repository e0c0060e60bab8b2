"""torchrun script that puts every rank on cuda:0."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("nccl")
    model = torch.nn.Linear(32, 2).to("cuda:0")
    model = DDP(model)
    data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 2, (4096,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, num_workers=2)
    opt = torch.optim.AdamW(model.parameters())
    for epoch in range(int(os.environ.get("EPOCHS", 3))):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to("cuda:0"), y.to("cuda:0")
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
