"""Gradient accumulation under DDP that all-reduces on every micro-batch."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

gradient_accumulation_steps = 8
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(128, 128).cuda(), device_ids=[local_rank])
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
data = TensorDataset(torch.randn(8192, 128))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=4)

for epoch in range(2):
    sampler.set_epoch(epoch)
    for i, (x,) in enumerate(loader):
        loss = model(x.cuda()).pow(2).mean() / gradient_accumulation_steps
        loss.backward()
        if (i + 1) % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
