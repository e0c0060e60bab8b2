"""AG005: a DDP-style `loss / k` kept inside `strategy.accumulate(k)` (found porting karpathy/nanoGPT's train.py)."""

import pytest

from allgpu.lint import check_source

HEAD = """
import torch, allgpu
strategy = allgpu.MirroredStrategy()
gradient_accumulation_steps = 4
"""

NANOGPT = """
for micro_step in range(gradient_accumulation_steps):
    logits, loss = model(X, Y)
    {division}
    with strategy.accumulate({k}):
        loss.backward()
"""


def ids(src):
    return [f.rule_id for f in check_source(src)]


@pytest.mark.parametrize("division,k", [
    ("loss = loss / gradient_accumulation_steps", "gradient_accumulation_steps"),
    ("loss /= gradient_accumulation_steps", "gradient_accumulation_steps"),
    ("loss = loss / 4", "4"),
    ("loss = loss_fn(logits, Y) / cfg.accum", "cfg.accum"),
])
def test_ag005_flags_the_ddp_division_kept(division, k):
    assert "AG005" in ids(HEAD + NANOGPT.format(division=division, k=k))


def test_ag005_flags_accumulate_object_built_outside_the_loop():
    src = HEAD + """
def train(model, steps):
    acc = strategy.accumulate(steps)
    for x, y in data:
        loss = model(x, y) / steps
        with acc:
            loss.backward()
"""
    assert "AG005" in ids(src)


@pytest.mark.parametrize("src", [
    HEAD + NANOGPT.format(division="pass", k="gradient_accumulation_steps"),            # the allgpu form
    HEAD + NANOGPT.format(division="loss = loss / temperature", k="gradient_accumulation_steps"),
    HEAD + NANOGPT.format(division="acc = correct / gradient_accumulation_steps", k="gradient_accumulation_steps"),
    # DDP's form under allgpu: no_sync on all but the k-th backward, the division is right there
    HEAD + "for m in range(gradient_accumulation_steps):\n    loss = model(x) / gradient_accumulation_steps\n"
           "    with strategy.no_sync():\n        loss.backward()\n",
    # Accelerate's accumulate(model): not allgpu's count
    HEAD + "for x in data:\n    with accelerator.accumulate(model):\n        loss = model(x) / gradient_accumulation_steps\n",
])
def test_ag005_quiet(src):
    assert "AG005" not in ids(src)


def test_ag005_quiet_without_an_allgpu_strategy():
    assert "AG005" not in ids("k = 4\nwith trainer.accumulate(k):\n    loss = loss / k\n")
