"""PT004 across modules, Pythia's shape (issue 21, tuning half a0700/a0701, facebookresearch/mmf's "Make cudnn
determinism true" fix): a data module fills a ``**kwargs`` dict with ``sampler=DistributedSampler(...)`` through a
helper and keeps the loader as ``self.train_loader``; the trainer copies that attribute
(``self.train_loader = self.task_loader.train_loader``) and loops over it in a loop that counts epochs
(``while it < max_iters: self.current_epoch += 1``). Nobody sets the epoch, so both modules are reported: the trainer
at its loop, the data module at its sampler. Written projects; not reported when either side sets the epoch, the
sampler does not shuffle, or the trainer runs no epochs."""

import textwrap

import pytest

from allgpu.lint import check_path
from allgpu.lint.catalog import RULES

LOADER = """
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class TaskLoader:
    def __init__(self, config):
        self.config = config

    def make_dataloaders(self):
        other_args = {{}}
        self._add_extra_args(self.train_task, other_args)
        self.train_loader = DataLoader(dataset=self.train_task, num_workers=4, **other_args)

    def _add_extra_args(self, task, other_args={{}}):
        if self.config.distributed:
            other_args["sampler"] = DistributedSampler(task{shuffle})
        else:
            other_args["shuffle"] = True
        other_args["batch_size"] = 8
        return other_args
    {seed}
"""

TRAINER = """
import torch
from pkg.common.task_loader import TaskLoader


class BaseTrainer:
    def load(self):
        self.task_loader = TaskLoader(self.config)
        self.task_loader.make_dataloaders()
        self.train_loader = self.task_loader.train_loader
        self.model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[self.local_rank])

    def train(self):
        {head} self.current_iteration < self.max_iterations:
            {counter}
            {call}
            for batch in self.train_loader:
                self.current_iteration += 1
                self.model(batch).sum().backward()
"""

SEED = """
    def seed_sampler(self, epoch):
        self.train_loader.sampler.set_epoch(epoch)
"""


def _project(root, shuffle="", seed="", counter="self.current_epoch += 1", call="", head="while"):
    files = {"pkg/common/task_loader.py": LOADER.format(shuffle=shuffle, seed=seed),
             "pkg/trainers/base_trainer.py": TRAINER.format(counter=counter, call=call, head=head)}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root / "pkg/common/task_loader.py", root / "pkg/trainers/base_trainer.py"


def _pt004(path):
    return [f.line for f in check_path(path, select=list(RULES)) if f.rule_id == "PT004"]


def test_both_sides_reported(tmp_path):
    loader, trainer = _project(tmp_path)
    assert _pt004(loader) == [17]  # the DistributedSampler call
    assert _pt004(trainer) == [17]  # the loop over self.train_loader


@pytest.mark.parametrize("kwargs", [
    {"shuffle": ", shuffle=False"},  # the same order is asked for
    {"seed": SEED, "call": "self.task_loader.seed_sampler(self.current_epoch)"},  # the authors' fix
    {"head": "if"},  # one pass over the loader: no epochs
])
def test_not_reported(tmp_path, kwargs):
    loader, trainer = _project(tmp_path, **kwargs)
    assert _pt004(loader) == [] and _pt004(trainer) == []
