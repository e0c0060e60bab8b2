"""FSDP training with a rank-0 guarded save and sampler epochs."""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")

model = FSDP(torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda())
optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
data = TensorDataset(torch.randn(10000, 512))
sampler = DistributedSampler(data, seed=0)
loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=4, pin_memory=True)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for (x,) in loader:
        loss = model(x.cuda()).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
state = model.state_dict()
if rank == 0:
    torch.save(state, "fsdp.pt")
dist.destroy_process_group()
