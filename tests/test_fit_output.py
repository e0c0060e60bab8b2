"""What `fit` prints on replica 0, read as a user reads a log: the epoch's progress line comes first and the step
monitor's table for that epoch after it, numbered as the progress line numbers it (1-based, as Keras)."""

import re

import torch
from torch.utils.data import TensorDataset

import allgpu


def test_each_epoch_line_is_followed_by_its_own_monitor_table(capsys):
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=2, global_batch_size=16,
               strategy=strategy, monitor=True, num_workers=0)
    err = capsys.readouterr().err
    marks = re.findall(r"^(?:epoch (\d)/2 .*?(\d+)/4|allgpu step monitor, epoch (\d))", err, re.MULTILINE)
    order = [("progress", int(a)) if a else ("monitor", int(c)) for a, _, c in marks]
    assert order == [("progress", 1), ("monitor", 1), ("progress", 2), ("monitor", 2)], err
    assert all(int(steps) == 4 for a, steps, _ in marks if a)  # the step count is not squeezed to "4…"
