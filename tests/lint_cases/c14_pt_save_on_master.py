"""torchvision-references style: save_on_master helper, accumulation via require_backward_grad_sync."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0


def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)


def save_checkpoint(state, path):
    torch.save(state, path)


accum_iter = 4
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DistributedDataParallel(torch.nn.Linear(32, 32).cuda(), device_ids=[local_rank])
optimizer = torch.optim.AdamW(model.parameters())
data = TensorDataset(torch.randn(1024, 32))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=32, sampler=sampler, num_workers=4)

for epoch in range(10):
    sampler.set_epoch(epoch)
    for i, (x,) in enumerate(loader):
        model.require_backward_grad_sync = (i + 1) % accum_iter == 0
        loss = model(x.cuda()).square().mean() / accum_iter
        loss.backward()
        if (i + 1) % accum_iter == 0:
            optimizer.step()
            optimizer.zero_grad()
    save_on_master(model.module.state_dict(), f"epoch{epoch}.pt")
    if is_main_process():
        save_checkpoint({"epoch": epoch}, "last.pt")
