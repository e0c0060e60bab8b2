"""A complete torchrun DDP training script, done right."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, models, transforms


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--resume", default="")
    return p.parse_args()


def main():
    args = parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    device = torch.device("cuda", local_rank)

    model = models.resnet50()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if args.resume:
        state = torch.load(args.resume, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])

    train_set = datasets.ImageFolder("data/train", transforms.ToTensor())
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, pin_memory=True, persistent_workers=True)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for images, target in loader:
            images, target = images.to(device, non_blocking=True), target.to(device, non_blocking=True)
            loss = criterion(model(images), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"model": model.module.state_dict(), "epoch": epoch}, "checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
