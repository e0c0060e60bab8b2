"""Distributed evaluation: one pass, sampler without shuffling, no set_epoch needed."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@torch.no_grad()
def evaluate():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(16, 2).cuda(), device_ids=[local_rank])
    state = torch.load("model.pt", map_location="cpu", weights_only=True)
    model.module.load_state_dict(state)
    data = TensorDataset(torch.randn(1000, 16), torch.randint(0, 2, (1000,)))
    loader = DataLoader(data, batch_size=100, sampler=DistributedSampler(data, shuffle=False), num_workers=2)
    correct = torch.zeros(1, device="cuda")
    for x, y in loader:
        correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
    dist.all_reduce(correct)
    if dist.get_rank() == 0:
        print("accuracy", correct.item() / len(data))


if __name__ == "__main__":
    evaluate()
