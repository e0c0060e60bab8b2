"""'cuda:0' is only a default, replaced by the local rank; bare .cuda() after set_device."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

device = "cuda:0"
distributed = "WORLD_SIZE" in os.environ
if distributed:
    local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}"
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")

model = torch.nn.Linear(10, 10).to(device)
if distributed:
    model = DDP(model, device_ids=[torch.cuda.current_device()])
data = TensorDataset(torch.randn(640, 10))
sampler = DistributedSampler(data) if distributed else None
loader = DataLoader(data, batch_size=64, sampler=sampler, shuffle=sampler is None, num_workers=2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for (x,) in loader:
        loss = model(x.cuda()).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
