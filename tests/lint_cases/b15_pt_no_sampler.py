"""DDP with a plain shuffled DataLoader: every rank reads all the data."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group(backend="nccl")

model = DistributedDataParallel(nn.Linear(10, 1).cuda(), device_ids=[local_rank])
dataset = TensorDataset(torch.randn(10000, 10), torch.randn(10000, 1))
train_loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(5):
    for x, y in train_loader:
        loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
