"""What `fit` prints on replica 0, read as a user reads a log. Quiet by default, as Keras is: one line per epoch,
the step monitor's table once at the end, a finding's line when it first appears (naming `allgpu doctor --explain
ID`); `verbose=2` prints each epoch's table after its progress line, numbered as the progress line numbers it
(1-based, as Keras); `verbose=0` prints nothing."""

import re

import pytest
import torch
from torch.utils.data import TensorDataset

import allgpu
from allgpu.findings import Finding
from allgpu.monitor.report import EpochReport


def _fit(capsys, verbose):
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=3, global_batch_size=16,
               strategy=strategy, monitor=True, num_workers=0, verbose=verbose)
    captured = capsys.readouterr()
    return captured.err + captured.out


def _order(text):
    marks = re.findall(r"^(?:epoch (\d)/3 .*?(\d+)/4|allgpu step monitor, epoch (\d))", text, re.MULTILINE)
    assert all(int(steps) == 4 for a, steps, _ in marks if a)  # the step count is not squeezed to "4…"
    return [("progress", int(a)) if a else ("monitor", int(c)) for a, _, c in marks]


def test_by_default_one_line_per_epoch_and_the_table_once_at_the_end(capsys):
    text = _fit(capsys, verbose=1)
    assert _order(text) == [("progress", 1), ("progress", 2), ("progress", 3), ("monitor", 3)], text
    assert sum(1 for line in text.splitlines() if line.startswith("epoch ")) == 3
    assert "Fix:" not in text  # the long fix is behind `allgpu doctor --explain ID`


def test_verbose_2_prints_each_epochs_table_after_its_line(capsys):
    text = _fit(capsys, verbose=2)
    assert _order(text) == [("progress", 1), ("monitor", 1), ("progress", 2), ("monitor", 2),
                            ("progress", 3), ("monitor", 3)], text


def test_verbose_0_prints_nothing(capsys):
    assert _fit(capsys, verbose=0).strip() == ""


def test_a_finding_is_one_line_naming_the_explain_command_and_explain_knows_it():
    from allgpu.doctor.explain import explain

    report = EpochReport(0, [], [Finding("straggler", "warning", "replica 1 computes 9 ms a step. More words.",
                                         "the long fix")])
    (line,) = report.findings_lines()
    assert line == ("allgpu: [warning] straggler: replica 1 computes 9 ms a step. "
                    "(fix: allgpu doctor --explain straggler)")
    assert "Fix: Find what slows replica R" in explain("straggler")
    for finding_id in ("communication-bound", "input-bound", "idle-device", "needs-sharding", "cpu-build", "tf001"):
        assert "Fix" in explain(finding_id), finding_id
    with pytest.raises(allgpu.errors.ArgumentError, match="known ids: input-bound"):
        explain("no-such-id")
