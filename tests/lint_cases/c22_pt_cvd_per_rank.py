"""mp.spawn workers, each narrowing CUDA_VISIBLE_DEVICES to its own GPU from its rank (correct)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(0)
    model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = model(torch.randn(4, 8).cuda()).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    n = torch.cuda.device_count()
    mp.spawn(worker, args=(n,), nprocs=n)
