"""PT004 across modules (issue 21): a trainer whose training loader, built on a DistributedSampler, comes from
another module of its project and that nobody gives ``set_epoch``. Written projects: the loader built by the
trainer's caller (a parameter), and one held by a data object built in a folder beside the trainer's (asv-subtools'
``libs/egs`` and ``libs/training``, tuning half a0304). Reported at the trainer's loop over the loader; not when
either side sets the epoch, the sampler does not shuffle, or the loader is not a training one."""

import textwrap

import pytest

from allgpu.lint import check_path
from allgpu.lint.catalog import RULES

EGS = """
import torch
from torch.utils.data import DataLoader

class Bunch:
    def __init__(self, trainset, validset, use_ddp):
        if use_ddp:
            train_sampler = torch.utils.data.distributed.DistributedSampler(trainset, shuffle={shuffle})
        else:
            train_sampler = None
        self.{name} = DataLoader(trainset, batch_size=8, shuffle=train_sampler is None, sampler=train_sampler)
        {extra}
"""

TRAINER = """
import torch

class Trainer:
    def __init__(self, elements):
        self.elements = elements

    def run(self, epochs):
        data = self.elements["data"]
        model = self.elements["model"]
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        for epoch in range(epochs):
            {set_epoch}
            for i, batch in enumerate(data.{name}):
                model(batch).sum().backward()
"""


def _write(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


def _pt004(path):
    return [(f.line, f.message) for f in check_path(path, select=list(RULES)) if f.rule_id == "PT004"]


@pytest.mark.parametrize("shuffle,name,extra,set_epoch,reported", [
    ("True", "train_loader", "", "", True),
    # the trainer sets the epoch (the authors' fix)
    ("True", "train_loader", "", "data.train_loader.sampler.set_epoch(epoch)", False),
    # the data module offers it and runs it per epoch itself (a method the trainer would call)
    ("True", "train_loader", "def set_epoch(self, epoch):\n            self.train_loader.sampler.set_epoch(epoch)", "", False),
    ("False", "train_loader", "", "", False),  # a sampler that does not shuffle
    ("True", "valid_loader", "", "", False),  # not a training loader
])
def test_loader_held_by_a_data_object_built_beside_the_trainer(tmp_path, shuffle, name, extra, set_epoch, reported):
    _write(tmp_path, {"libs/egs/egs.py": EGS.format(shuffle=shuffle, name=name, extra=extra),
                      "libs/training/trainer.py": TRAINER.format(name=name, set_epoch=set_epoch or "pass")})
    found = _pt004(tmp_path / "libs/training/trainer.py")
    assert [line for line, _ in found] == ([15] if reported else [])
    if reported:
        assert "egs.py:8" in found[0][1] and "data.train_loader" in found[0][1]


def test_no_data_module_in_the_project_is_not_guessed(tmp_path):
    _write(tmp_path, {"libs/training/trainer.py": TRAINER.format(name="train_loader", set_epoch="pass")})
    assert _pt004(tmp_path / "libs/training/trainer.py") == []


ENGINE = """
def fit(model, train_loader, epochs, opt):
    for epoch in range(epochs):
        for x, y in train_loader:
            opt.zero_grad()
            model(x, y).backward()
            opt.step()
"""

MAIN = """
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from engine import fit

dist.init_process_group("nccl")
model = DDP(net)
sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, sampler=sampler, batch_size=8)
{set_epoch}
fit({arg})
"""


@pytest.mark.parametrize("arg,set_epoch,reported", [
    ("model, loader, 10, opt", "", True),
    ("model, epochs=10, opt=opt, train_loader=loader", "", True),
    ("model, DataLoader(train_set, sampler=DistributedSampler(train_set, shuffle=False)), 10, opt", "", False),
    # the caller sets the epoch somewhere (its own loop over fit, or a hook): not this rule's case
    ("model, loader, 10, opt", "sampler.set_epoch(0)", False),
])
def test_loader_built_by_the_trainers_caller(tmp_path, arg, set_epoch, reported):
    _write(tmp_path, {"engine.py": ENGINE, "main.py": MAIN.format(arg=arg, set_epoch=set_epoch)})
    found = _pt004(tmp_path / "engine.py")
    assert [line for line, _ in found] == ([4] if reported else [])
    if reported:
        assert "main.py:8" in found[0][1]
    assert [f for f in _pt004(tmp_path / "main.py") if "built with a DistributedSampler in" in f[1]] == []


BASE = """
from torch.utils.data import DataLoader, DistributedSampler


class BaseDataset:
    def _get_sampler(self{param}):
        {body}

    def iterator(self, **kwargs):
        return DataLoader(self, batch_size=8, sampler=self._get_sampler({arg}))
"""

VIDEO = """
from torch.utils.data import DistributedSampler

from .base import BaseDataset


class VideoDataset(BaseDataset):
    def _get_sampler(self{param}):
        sampler = DistributedSampler(self, shuffle={shuffle})
        {set_epoch}
        return sampler
"""


@pytest.mark.parametrize("fixed,shuffle,reported", [(False, "self.shuffle", True), (True, "self.shuffle", False),
                                                    (False, "False", False)])
def test_a_sampler_factory_overriding_the_one_a_base_class_loader_uses(tmp_path, fixed, shuffle, reported):
    # ClassyVision's video datasets (tuning half a0400/a0401): the base class's iterator() builds a loader per phase
    # with self._get_sampler(); the subclass returns a new DistributedSampler that nobody gives the epoch
    param, arg = (", epoch", "epoch=kwargs['epoch']") if fixed else ("", "")
    base_body = ("s = DistributedSampler(self)\n        s.set_epoch(epoch)\n        return s" if fixed
                 else "return DistributedSampler(self)")
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": BASE.format(param=param, arg=arg, body=base_body),
                      "pkg/video.py": VIDEO.format(param=param, shuffle=shuffle,
                                                   set_epoch="sampler.set_epoch(epoch)" if fixed else "pass")})
    found = _pt004(tmp_path / "pkg/video.py")
    assert [line for line, _ in found] == ([9] if reported else [])
    if reported:
        assert "base.py:10" in found[0][1]
