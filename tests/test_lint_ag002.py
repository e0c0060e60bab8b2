"""Issue 10, item 6: lint flags TF's hand-written loss scaling in allgpu scripts (AG002)."""

import pytest

from allgpu.lint import check_source

HEAD = """
import torch, allgpu
GLOBAL_BATCH = 256
strategy = allgpu.MirroredStrategy()
data = strategy.distribute_dataset(ds, global_batch_size=GLOBAL_BATCH)
"""


def ids(src):
    return [f.rule_id for f in check_source(src)]


@pytest.mark.parametrize("line", [
    "loss = loss_fn(out, y).sum() / GLOBAL_BATCH",
    "loss = torch.sum(per_example) / GLOBAL_BATCH",
    "loss = per_example.sum() / args.global_batch_size",
])
def test_ag002_flags_division_by_the_global_batch(line):
    assert "AG002" in ids(HEAD + line + "\n")


@pytest.mark.parametrize("line", [
    "loss = allgpu.compute_average_loss(per_example, GLOBAL_BATCH)",
    "loss = per_example.mean()",
    "loss = per_example.sum() / len(y)",
    "accuracy = correct.sum() / total",
])
def test_ag002_quiet(line):
    assert "AG002" not in ids(HEAD + line + "\n")


def test_ag002_quiet_without_an_allgpu_strategy():
    assert "AG002" not in ids("import torch\nGLOBAL_BATCH = 8\nloss = x.sum() / GLOBAL_BATCH\n")
