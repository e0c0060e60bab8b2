"""CUDA_VISIBLE_DEVICES narrowed to one GPU at the top of a DDP script."""
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "1"

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(10):
    loss = model(torch.randn(4, 8, device="cuda")).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
