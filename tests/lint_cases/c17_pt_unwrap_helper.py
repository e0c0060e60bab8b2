"""Checks for DataParallel with isinstance (no DataParallel is built); rank-0 save by early return."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def unwrap(model):
    if isinstance(model, (nn.DataParallel, DDP)):
        return model.module
    return model


def save(model, path):
    if dist.get_rank() != 0:
        return
    torch.save(unwrap(model).state_dict(), path)


local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(nn.Linear(4, 4).cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    loss = model(torch.randn(2, 4).cuda()).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
save(model, "final.pt")
