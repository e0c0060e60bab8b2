"""DDP script using bare .cuda() without torch.cuda.set_device: all ranks on GPU 0."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
model = torch.nn.Linear(64, 64).cuda()
model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(100):
    loss = model(torch.randn(8, 64).cuda()).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
