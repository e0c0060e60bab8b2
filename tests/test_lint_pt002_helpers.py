"""PT002 in a training helper that starts nothing itself (issue 21, tuning half a1006-a1008: bubbliiiing's
``utils/utils_fit.py``, "fix ddp bugs"): ``fit_one_epoch`` moves batches with a bare ``.cuda()``, and the project's
``train.py`` that calls it starts DDP without ``torch.cuda.set_device``: every rank puts its batches on GPU 0. Not
reported when the caller sets the device, when the helper moves with ``.cuda(local_rank)``, when the caller does not
run DDP, when only a same-named function of another module is called, nor in the single-process branch of
``if local_rank > -1: ... else: x.cuda()``. Written projects only."""

import textwrap

import pytest

from allgpu.lint import check_path

FIT = """
import torch


def fit_one_epoch(model, opt, loader, local_rank):
    for images, targets in loader:
        images = images.{move}
        loss = model(images, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()


def save(net, path, local_rank):
    if local_rank > -1:
        if local_rank == 0:
            torch.save(net.state_dict(), path)
    else:
        net.cuda()
"""

TRAIN = """
import os
import torch
import torch.distributed as dist
from {source} import fit_one_epoch


def main(model, opt, loader):
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    {set_device}
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
    for epoch in range(10):
        fit_one_epoch(model, opt, loader, local_rank)
"""


def _pt002(tmp_path, move="cuda()", set_device="pass", source="utils_fit"):
    (tmp_path / "utils_fit.py").write_text(textwrap.dedent(FIT.format(move=move)))
    (tmp_path / "other.py").write_text("def fit_one_epoch(*a):\n    pass\n")
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN.format(set_device=set_device, source=source)))
    return [f.location.line for f in check_path(tmp_path / "utils_fit.py") if f.id == "PT002"]


@pytest.mark.unit
def test_bare_cuda_in_a_helper_of_a_ddp_script_without_set_device(tmp_path):
    assert _pt002(tmp_path) == [7]


@pytest.mark.unit
@pytest.mark.parametrize("kw", [{"move": "cuda(local_rank)"}, {"set_device": "torch.cuda.set_device(local_rank)"},
                                {"source": "other"}])
def test_not_reported(tmp_path, kw):
    assert _pt002(tmp_path, **kw) == []
