"""Issue 21, PyTorch flows that only show in a project's other files (the tuning half of the author-fix corpus,
linted inside each file's project): written as small projects, and whether the rule must report the checked file."""

import textwrap

import pytest

from allgpu.lint import RULES, check_path

# a library data module: builds the training DataLoader, knows nothing of DDP itself
DATA = """
import torch
from torch.utils.data import DataLoader

class DataConfig:
    def get_dataloader(self, dataset):
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=self.shuffle, sampler={sampler})

    def get_dataloaders(self):
        return {{name: d.get_dataloader(d.dataset) for name, d in self.datasets.items()}}

def TrainDataLoader(config, train_dataset):
    train_dataloader = DataLoader(train_dataset, batch_size=config.batch_size, num_workers=4)
    return train_dataloader
"""

# the project's trainer, one folder up: runs DDP and calls the data module's builders
TRAINER = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from pkg.data.base import TrainDataLoader

def main(cfg, model, rank):
    torch.distributed.init_process_group("nccl")
    model = DDP(model.cuda(rank), device_ids=[rank])
    {use}
    for batch in loaders["train"]:
        model(batch).sum().backward()
"""


def _pt003(tmp_path, sampler="None", use='loaders = cfg.data.get_dataloaders()', trainer=TRAINER, data=DATA):
    data_dir = tmp_path / "pkg" / "data"
    data_dir.mkdir(parents=True)
    (data_dir / "base.py").write_text(textwrap.dedent(data).format(sampler=sampler))
    (tmp_path / "pkg" / "trainer.py").write_text(textwrap.dedent(trainer).format(use=use))
    return [f.line for f in check_path(data_dir / "base.py", select=list(RULES)) if f.rule_id == "PT003"]


def test_pt003_data_module_loader_used_by_a_ddp_trainer_through_a_config_attribute(tmp_path):
    assert _pt003(tmp_path) == [7]  # get_dataloader's loader: get_dataloaders() calls it, the trainer calls that


def test_pt003_data_module_loader_imported_by_name_by_a_ddp_trainer(tmp_path):
    use = "loaders = {'train': TrainDataLoader(cfg, ds)}"
    assert _pt003(tmp_path, use=use) == [13]


@pytest.mark.parametrize("change", [
    {"sampler": "DistributedSampler(dataset)"},  # the authors' fix
    {"trainer": TRAINER.replace("DDP(model.cuda(rank), device_ids=[rank])", "model.cuda()")
                       .replace('torch.distributed.init_process_group("nccl")', "pass")},  # no DDP in the project
    {"trainer": "import lightning\n" + TRAINER},  # Lightning puts the DistributedSampler in itself
    {"data": DATA.replace("get_dataloader(", "get_val_dataloader(")
                 .replace("TrainDataLoader(", "TestDataLoader(")},  # evaluation loaders
    {"use": "loaders = cfg.data.get_datasets()"},  # the trainer does not use the loader builders
    {"data": DATA.replace("self.batch_size,", "self.batch_size // self.world_size,")},  # it knows the ranks
])
def test_pt003_data_module_not_reported(tmp_path, change):
    assert _pt003(tmp_path, **change) == []


def test_pt003_data_module_alone_is_not_reported(tmp_path):
    (tmp_path / "base.py").write_text(textwrap.dedent(DATA).format(sampler="None"))
    assert [f for f in check_path(tmp_path / "base.py", select=list(RULES)) if f.rule_id == "PT003"] == []


def test_pt003_colossalai_launcher_counts_as_ddp(tmp_path):
    trainer = """
    import colossalai
    from pkg.data.base import TrainDataLoader
    def main(cfg, ds):
        colossalai.launch_from_torch(config={{}})
        {use}
    """
    assert _pt003(tmp_path, trainer=trainer, use="loader = TrainDataLoader(cfg, ds)") == [13]


# ---- PT008: DDP wraps what a project helper returns: an instance of a project class built on a library BN model
MAIN = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from model import load_model

def worker(gpu, args):
    torch.distributed.init_process_group("nccl", rank=gpu, world_size=args.world_size)
    model, optimizer = load_model(args)
    model = DDP(model, device_ids=[gpu])
"""
MODEL = """
import torch
from modules import SimCLR

def load_model(args):
    model = SimCLR(args){extra}
    model = model.to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    return model, optimizer
"""
NET = """
import torch.nn as nn
import torchvision

class SimCLR(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.encoder = self.get_encoder(args.arch)
        self.projector = nn.Linear(512, 128)

    def get_encoder(self, name):
        encoders = {{"small": torchvision.models.{arch}(), "large": torchvision.models.{arch}()}}
        return encoders[name]
"""


def _pt008(tmp_path, arch="resnet18", extra="", model=MODEL):
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "__init__.py").write_text("from .simclr import SimCLR\n")
    (tmp_path / "modules" / "simclr.py").write_text(textwrap.dedent(NET).format(arch=arch))
    (tmp_path / "model.py").write_text(textwrap.dedent(model).format(extra=extra))
    (tmp_path / "main.py").write_text(textwrap.dedent(MAIN))
    return [f.line for f in check_path(tmp_path / "main.py", select=list(RULES)) if f.rule_id == "PT008"]


def test_pt008_helper_returns_a_project_class_built_on_a_library_batchnorm_model(tmp_path):
    assert _pt008(tmp_path) == [9]  # SimCLR: load_model() -> SimCLR(args) -> torchvision resnet18, re-exported


@pytest.mark.parametrize("change", [
    {"arch": "vit_b_16"},  # no BatchNorm in the library model
    {"extra": "\n    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)"},  # converted in the helper
    {"model": MODEL.replace("return model, optimizer", "return optimizer")},  # the class's instance not returned
])
def test_pt008_helper_class_not_reported(tmp_path, change):
    assert _pt008(tmp_path, **change) == []


# ---- PT007: a checkpoint object built only on some ranks, found through ``from pkg.utils import *``
SAVER = """
import torch

class CheckpointSaver:
    def save_checkpoint(self, epoch):
        self._save(f"checkpoint-{epoch}.pth.tar")

    def _save(self, path):
        torch.save(self.state, path)
"""
SCRIPT = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from tools.utils import *

def main(args, model, loader):
    torch.distributed.init_process_group("nccl")
    model = DDP(model)
    saver = None
    if {guard}:
        saver = CheckpointSaver()
    for epoch in range(10):
        train_one_epoch(model, loader, saver)
        if saver is not None:
            saver.save_checkpoint(epoch)

def train_one_epoch(model, loader, saver=None):
    for x in loader:
        model(x).sum().backward()
    if saver is not None and loader.recovery:
        saver.save_checkpoint(-1)

if __name__ == "__main__":
    main(parse_args(), build_model(), build_loader())
"""


def _pt007(tmp_path, guard):
    (tmp_path / "tools" / "utils").mkdir(parents=True)
    (tmp_path / "tools" / "__init__.py").write_text("")
    (tmp_path / "tools" / "utils" / "__init__.py").write_text("from .checkpoint_saver import CheckpointSaver\n")
    (tmp_path / "tools" / "utils" / "checkpoint_saver.py").write_text(textwrap.dedent(SAVER))
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT).format(guard=guard))
    return [(f.line, "per node" in f.message) for f in check_path(tmp_path / "train.py", select=list(RULES))
            if f.rule_id == "PT007"]


def test_pt007_saver_built_under_a_per_node_guard_writes_once_per_machine(tmp_path):
    # timm's train.py (thread-confirmed): the saver exists on local_rank 0 of every node; both saves are reported
    assert _pt007(tmp_path, "args.local_rank == 0") == [(15, True), (21, True)]


@pytest.mark.parametrize("guard", ["args.rank == 0", "torch.distributed.get_rank() == 0"])
def test_pt007_saver_built_under_a_job_guard_is_one_writer(tmp_path, guard):
    assert _pt007(tmp_path, guard) == []


def test_pt007_saver_built_on_every_rank_is_reported(tmp_path):
    assert _pt007(tmp_path, "True") == [(15, False), (21, False)]


# ---- PT008: ``lib.build_model(args)`` re-exported by ``lib/__init__``, picking a model of the project's own package
ZOO = {
    "lib/__init__.py": "from .build_model import build_model\n",
    "lib/build_model.py": "from . import models\n\ndef build_model(args):\n"
                          "    model = models.__dict__[args.model](num_classes=args.num_classes)\n    return model\n",
    "lib/models/__init__.py": "from .resnet import *\nfrom .axialnet import *\n",
    "lib/models/resnet.py": "import torch.nn as nn\n\nclass ResNet(nn.Module):\n    def __init__(self):\n"
                            "        super().__init__()\n        self.bn = nn.{norm}(64)\n\n{builder}",
    "lib/models/axialnet.py": "import torch.nn as nn\n\nclass AxialNet(nn.Module):\n    pass\n",
    "dist_train.py": "import torch\nimport lib\n\ndef main_worker(gpu, args):\n"
                     "    torch.distributed.init_process_group('nccl', rank=gpu, world_size=2)\n"
                     "    model = lib.build_model(args)\n"
                     "    model = torch.nn.parallel.DistributedDataParallel(model.cuda(gpu), device_ids=[gpu])\n",
}


@pytest.mark.parametrize("norm,builder,reported", [
    ("BatchNorm2d", "def resnet50():\n    return ResNet()\n", True),
    ("GroupNorm", "def resnet50():\n    return ResNet()\n", False),
    ("SyncBatchNorm", "def resnet50():\n    return ResNet()\n", False),
    ("BatchNorm2d", "", False),  # the BatchNorm class is used by nothing (I-JEPA's convolutional stem)
])
def test_pt008_model_picked_by_name_from_the_projects_batchnorm_package(tmp_path, norm, builder, reported):
    for rel, text in ZOO.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text.format(norm=norm, builder=builder))
    found = [f.line for f in check_path(tmp_path / "dist_train.py", select=list(RULES)) if f.rule_id == "PT008"]
    assert found == ([7] if reported else [])


# ---- PT004: a library dataset whose iterator() builds a new DistributedSampler each call (ClassyVision)
DATASET = """
from torch.utils.data import DataLoader, DistributedSampler

class ClassyDataset:
    def _get_sampler(self{param}):
        sampler = DistributedSampler(self, num_replicas=get_world_size(), rank=get_rank(), shuffle={shuffle})
        {set_epoch}
        return sampler

    def iterator(self, *args, **kwargs):
        return DataLoader(self, batch_size=self.batchsize_per_replica, sampler=self._get_sampler({arg}))
"""


@pytest.mark.parametrize("shuffle,fixed,reported", [("self.shuffle", False, True), ("self.shuffle", True, False),
                                                    ("False", False, False)])
def test_pt004_loader_rebuilt_with_a_fresh_sampler_never_given_the_epoch(tmp_path, shuffle, fixed, reported):
    text = DATASET.format(param=", epoch" if fixed else "", arg="epoch=kwargs['epoch']" if fixed else "",
                          set_epoch="sampler.set_epoch(epoch)" if fixed else "", shuffle=shuffle)
    (tmp_path / "classy_dataset.py").write_text(textwrap.dedent(text))
    found = [f.line for f in check_path(tmp_path / "classy_dataset.py", select=list(RULES)) if f.rule_id == "PT004"]
    assert found == ([6] if reported else [])
