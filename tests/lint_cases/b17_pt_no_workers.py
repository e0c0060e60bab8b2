"""A correct DDP script whose DataLoader has no worker processes."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")

data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 4, (2048,)))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=64, sampler=sampler)
model = DDP(torch.nn.Linear(64, 4).cuda(), device_ids=[rank])
opt = torch.optim.Adam(model.parameters())
for epoch in range(4):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
