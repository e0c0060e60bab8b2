"""PT004 beyond the plain spelling (issue 21): a project's own subclass of DistributedSampler that keeps the parent's
epoch-seeded shuffle, and a loop that passes over the training loader again and again with no name saying "epoch"
(``while step < max_steps:``, as DeepSpeedExamples' ``run_clm_no_trainer.py`` among strangers' files). Written
scripts, with whether PT004 must report them."""

import pytest

from allgpu.lint import check_path
from allgpu.lint.catalog import RULES
from tests.lint_helpers import ids

HEAD = """import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
"""

BUCKET = """
class BucketSampler(DistributedSampler):
    def __init__(self, dataset, boundaries, num_replicas=None, rank=None, shuffle=True):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle)
        self.boundaries = boundaries
    def __iter__(self):
        {body}
"""

TRAIN = """
def main(rank, n):
    dist.init_process_group("nccl", rank=rank, world_size=n)
    sampler = BucketSampler(ds, [32, 300], num_replicas=n, rank=rank, shuffle=True)
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=4)
    model = torch.nn.parallel.DistributedDataParallel(net.cuda(rank), device_ids=[rank])
    for epoch in range(100):
        {set_epoch}
        for x, y in loader:
            model(x).sum().backward()
            opt.step()
"""

SEEDED = "g = torch.Generator()\n        g.manual_seed(self.epoch)\n        return iter(torch.randperm(len(self.dataset), generator=g).tolist())"
FIXED = "return iter(range(self.rank, len(self.dataset), self.num_replicas))"


@pytest.mark.parametrize("body,set_epoch,reported", [
    (SEEDED, "pass", True),  # a bucketing sampler seeded by the epoch nobody sets (VITS-style)
    (SEEDED, "sampler.set_epoch(epoch)", False),
    (FIXED, "pass", False),  # its own order reads no epoch: nothing to set
])
def test_project_subclass_of_distributed_sampler(body, set_epoch, reported):
    src = HEAD + BUCKET.format(body=body) + TRAIN.format(set_epoch=set_epoch)
    assert ("PT004" in ids(src)) is reported


def test_subclass_imported_from_a_module_of_the_project(tmp_path):
    (tmp_path / "data_utils.py").write_text(HEAD + BUCKET.format(body=SEEDED))
    train = HEAD + "from data_utils import BucketSampler\n" + TRAIN.format(set_epoch="pass")
    (tmp_path / "train.py").write_text(train)
    assert "PT004" in {f.rule_id for f in check_path(tmp_path / "train.py", select=list(RULES))}


LOOP = HEAD + """
def main(rank, n):
    dist.init_process_group("nccl", rank=rank, world_size=n)
    sampler = DistributedSampler(ds, num_replicas=n, rank=rank, shuffle=split == "train")
    {name} = DataLoader(ds, sampler=sampler, batch_size=8, num_workers=4)
    model = torch.nn.parallel.DistributedDataParallel(net.cuda(rank), device_ids=[rank])
    step = 0
    while step < max_steps:
        for x, y in {name}:
            {work}
            step += 1
"""


@pytest.mark.parametrize("name,work,reported", [
    ("train_loader", "model(x).sum().backward(); opt.step()", True),  # every pass of the while is an epoch
    ("val_loader", "model(x).sum().backward(); opt.step()", False),  # not the training loader
    ("train_loader", "preds.append(model(x))", False),  # no training in the passes
])
def test_passes_over_the_training_loader_are_epochs(name, work, reported):
    assert ("PT004" in ids(LOOP.format(name=name, work=work))) is reported
