"""PT006 when the micro-step test is spelled other ways (issue 21, written from the rule's definition and the
accumulation idioms of training scripts; written scripts only): the step after ``if (i + 1) % k != 0: continue``,
and under ``if should_step:`` where the loop binds ``should_step = (step + 1) % k == 0``. Not reported with
``no_sync()`` on the skipped micro-steps, nor when the skip tests something else than micro-steps."""

import textwrap

import pytest

from allgpu.lint import check_path

CONTINUE = """
import contextlib
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model, loader):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    model = DDP(model.cuda(), device_ids=[args.local_rank])
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for i, (x, y) in enumerate(loader):
        with {ctx}:
            loss = model(x).sum() / args.accum
            loss.backward()
        if {skip}:
            continue
        opt.step()
        opt.zero_grad()
"""

FLAG = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model, loader):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    model = DDP(model.cuda(), device_ids=[args.local_rank])
    opt = torch.optim.AdamW(model.parameters())
    for step, batch in enumerate(loader):
        loss = model(**batch).loss / args.gradient_accumulation_steps
        loss.backward()
        should_step = {flag}
        if should_step:
            opt.step()
            opt.zero_grad()
"""


def _pt006(tmp_path, text):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return [f.location.line for f in check_path(path) if f.id == "PT006"]


@pytest.mark.unit
@pytest.mark.parametrize("ctx, skip, expected", [
    ("contextlib.nullcontext()", "(i + 1) % args.accum != 0", [16]),
    ("model.no_sync() if (i + 1) % args.accum else contextlib.nullcontext()", "(i + 1) % args.accum != 0", []),
    ("contextlib.nullcontext()", "x is None", []),
])
def test_step_after_a_micro_step_continue(tmp_path, ctx, skip, expected):
    assert _pt006(tmp_path, CONTINUE.format(ctx=ctx, skip=skip)) == expected


@pytest.mark.unit
def test_skip_before_the_backward_is_a_share_of_batches(tmp_path):
    """``if (i + 1) % k != 0: continue`` before forward and backward: the loop takes every k-th batch and steps on
    each one it takes; nothing accumulates (the code before this test reported it)."""
    text = CONTINUE.replace("        with {ctx}:", "        if {skip}:\n            continue\n        with {ctx}:")
    text = text.replace("        if {skip}:\n            continue\n        opt.step()", "        opt.step()")
    assert "continue\n        opt.step()" not in text
    assert _pt006(tmp_path, text.format(ctx="contextlib.nullcontext()", skip="(i + 1) % args.accum != 0")) == []


@pytest.mark.unit
@pytest.mark.parametrize("flag, expected", [
    ("(step + 1) % args.gradient_accumulation_steps == 0", [14]),
    ("loss.item() > 0", []),
])
def test_step_under_a_flag_bound_to_a_modulo(tmp_path, flag, expected):
    assert _pt006(tmp_path, FLAG.format(flag=flag)) == expected
