"""A CNN with BatchNorm wrapped in DDP without SyncBatchNorm."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean((2, 3)))


local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(Net().cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    x = torch.randn(4, 3, 32, 32, device="cuda")
    loss = model(x).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
