"""PyTorch flows through project builders (issue 21, written from the rules' definitions and the ImageNet-example
idioms, checked on the tuning half and strangers' code; written projects only):

- PT008: DDP wraps a project builder handed a torchvision architecture to build (``SimSiam(models.__dict__[args.arch],
  dim)``, ``Builder(torchvision.models.resnet50)``), or an instance of a class of another project module whose
  methods use ``nn.BatchNorm*`` layers; not when that class converts to SyncBatchNorm, nor a BatchNorm-free class,
  nor a class that shuffles the batch across GPUs for its BatchNorm (MoCo's ``_batch_shuffle_ddp``, seen in a
  stranger's copy of MoCo).
- PT004: the epoch loop iterates a loader that a function of another project module returns, built there on a
  shuffling DistributedSampler (``sampler = DistributedSampler(ds) if distributed else None``); not when the caller
  sets the epoch through ``loader.sampler``, nor when the sampler does not shuffle.
"""

import textwrap

import pytest

from allgpu.lint import check_path

MODELS = """
import torch.nn as nn
import torchvision


class Siam(nn.Module):
    def __init__(self, base_encoder, dim=2048):
        super().__init__()
        self.encoder = base_encoder(num_classes=dim)
        self.pred = nn.Sequential(nn.Linear(dim, 512), {norm}, nn.ReLU(), nn.Linear(512, dim))
        {extra}

    def forward(self, x):
        return self.pred(self.encoder(x))
"""

TRAIN_CLASS = """
import torch
import torch.distributed as dist
from models_lib import Siam


def main(args, encoder):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.gpu)
    model = Siam(encoder, args.dim).cuda(args.gpu)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
"""

TRAIN_ARCH = """
import torch
import torch.distributed as dist
import torchvision.models as models


class Builder(torch.nn.Module):
    def __init__(self, base, dim):
        super().__init__()
        self.net = base(num_classes=dim)
    {shuffle}


def main(args):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.gpu)
    model = Builder({arch}, args.dim)
    model.cuda(args.gpu)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
"""

DATA = """
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def build_loader(dataset, batch_size, distributed):
    sampler = DistributedSampler(dataset{shuffle}) if distributed else None
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=sampler is None, num_workers=4)
    return loader
"""

TRAIN_LOOP = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from data_utils import build_loader


def main(args, model, dataset):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    model = DDP(model.cuda(), device_ids=[args.local_rank])
    loader = build_loader(dataset, 32, True)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for epoch in range(args.epochs):
        {set_epoch}
        for x, y in loader:
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def _lint(tmp_path, files: dict, target: str, rule: str) -> list:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return [f for f in check_path(tmp_path / target) if f.id == rule]


@pytest.mark.unit
@pytest.mark.parametrize("norm, extra, expected", [
    ("nn.BatchNorm1d(512)", "", 1),
    ("nn.LayerNorm(512)", "", 0),
    ("nn.BatchNorm1d(512)", "self.sync = nn.SyncBatchNorm.convert_sync_batchnorm", 0),
])
def test_pt008_project_class_with_batchnorm(tmp_path, norm, extra, expected):
    found = _lint(tmp_path, {"models_lib.py": MODELS.format(norm=norm, extra=extra), "train.py": TRAIN_CLASS},
                  "train.py", "PT008")
    assert [f.location.line for f in found] == ([11] if expected else [])


@pytest.mark.unit
@pytest.mark.parametrize("arch, shuffle, expected", [
    ("models.__dict__[args.arch]", "", [19]),
    ("models.resnet50", "", [19]),
    ("getattr(models, args.arch)", "", [19]),
    ("models.vit_b_16", "", []),
    ("models.__dict__[args.arch]", "def _batch_shuffle_ddp(self, x): return x", []),  # MoCo's shuffling BN
])
def test_pt008_builder_handed_an_architecture(tmp_path, arch, shuffle, expected):
    found = _lint(tmp_path, {"train.py": TRAIN_ARCH.format(arch=arch, shuffle=shuffle)}, "train.py", "PT008")
    assert [f.location.line for f in found] == expected


@pytest.mark.unit
@pytest.mark.parametrize("shuffle, set_epoch, expected", [
    ("", "pass", [16]),
    ("", "loader.sampler.set_epoch(epoch)", []),
    (", shuffle=False", "pass", []),
])
def test_pt004_loader_from_a_helper_module(tmp_path, shuffle, set_epoch, expected):
    files = {"data_utils.py": DATA.format(shuffle=shuffle), "train.py": TRAIN_LOOP.format(set_epoch=set_epoch)}
    found = _lint(tmp_path, files, "train.py", "PT004")
    assert [f.location.line for f in found] == expected
    assert all("data_utils.py:7" in f.message for f in found)
