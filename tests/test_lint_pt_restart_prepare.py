"""PT004 for a step loop that restarts its loader (``except StopIteration: it = iter(train_loader)``): each restart
is a new pass over the data, so a DistributedSampler without set_epoch repeats its order; PT003 for a DataLoader that
a file running under Accelerate never hands to ``accelerator.prepare`` (Accelerate shards only the loaders it
prepares). Issue 21, written from the rules' definitions; written scripts only."""

import textwrap

import pytest

from allgpu.lint import check_path

RESTART = """
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model, dataset):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    model = DDP(model.cuda(), device_ids=[args.local_rank])
    sampler = DistributedSampler(dataset)
    train_loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    it, epoch = iter(train_loader), 0
    for step in range(args.max_steps):
        try:
            x, y = next(it)
        except StopIteration:
            epoch += 1
            {reset}
            it = iter(train_loader)
            x, y = next(it)
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

ACCEL = """
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator


def main(model, ds):
    accelerator = Accelerator()
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    model, opt{prepared} = accelerator.prepare(model, opt{given})
    for epoch in range(3):
        for x, y in loader:
            loss = model(x).sum()
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
"""


def _found(tmp_path, text, rule):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return [f.location.line for f in check_path(path) if f.id == rule]


@pytest.mark.unit
@pytest.mark.parametrize("reset, expected", [("pass", [13]), ("sampler.set_epoch(epoch)", [])])
def test_pt004_restarted_loader(tmp_path, reset, expected):
    assert _found(tmp_path, RESTART.format(reset=reset), "PT004") == expected


@pytest.mark.unit
@pytest.mark.parametrize("prepared, given, expected", [("", "", [9]), (", loader", ", loader", [])])
def test_pt003_loader_accelerate_never_prepares(tmp_path, prepared, given, expected):
    assert _found(tmp_path, ACCEL.format(prepared=prepared, given=given), "PT003") == expected
