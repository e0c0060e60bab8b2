"""Every rank writes the checkpoint."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(16, 16).cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(3):
    x = torch.randn(32, 16, device="cuda")
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.save({"model": model.module.state_dict(), "epoch": epoch}, f"ckpt_{epoch}.pt")
