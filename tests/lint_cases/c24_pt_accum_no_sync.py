"""Gradient accumulation under DDP with no_sync on the micro-steps."""
import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

accumulation_steps = 4
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(64, 64).cuda(), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(4096, 64))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=4)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for i, (x,) in enumerate(loader):
        sync = (i + 1) % accumulation_steps == 0
        with (contextlib.nullcontext() if sync else model.no_sync()):
            loss = model(x.cuda()).pow(2).mean() / accumulation_steps
            loss.backward()
        if sync:
            optimizer.step()
            optimizer.zero_grad()
