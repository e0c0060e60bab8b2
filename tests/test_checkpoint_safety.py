"""Issue 10, item 10 (checkpoint parts) and item 4's "never delete": a checkpoint_dir that cannot be written is
an error before any training; a checkpoint that fails verification is moved aside, never deleted."""

import os
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import allgpu
from allgpu import checkpoint
from allgpu.errors import CheckpointError
from allgpu.train.progress import Callback


class Count(Callback):
    def __init__(self):
        self.batches = 0

    def on_train_batch_end(self, step, logs):
        self.batches += 1


def _fit(directory, callbacks=()):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    data = TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,)))
    return allgpu.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), data, epochs=1,
                      global_batch_size=8, checkpoint_dir=directory, verbose=False, num_workers=0,
                      callbacks=callbacks)


def _unwritable(tmp_path) -> Path:
    if os.geteuid() == 0:  # root writes through permission bits: use a place no one can write
        return Path("/proc/self/allgpu-checkpoints")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    return folder / "ckpts"


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_a_bad_checkpoint_dir_fails_before_training(tmp_path, kind):
    if kind == "file":
        target = tmp_path / "model.pt"
        target.write_text("not a folder")
        expected = "is a file, not a folder"
    else:
        target, expected = _unwritable(tmp_path), "cannot be written"
    counter = Count()
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=expected) as info:
        _fit(target, [counter])
    assert counter.batches == 0  # nothing trained, nothing lost
    assert time.monotonic() - start < 10
    assert "Fix:" in str(info.value)


def test_save_into_a_file_path_is_a_checkpoint_error_not_a_raw_oserror(tmp_path):
    target = tmp_path / "weights.pt"
    target.write_text("x")
    with pytest.raises(CheckpointError, match="weights.pt"):
        checkpoint.save(target / "sub", nn.Linear(2, 2))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-8:] = bytes(b ^ 0xFF for b in data[-8:])
    path.write_bytes(bytes(data))


def test_checkpoints_that_fail_verification_are_moved_aside_never_deleted(tmp_path):
    model = nn.Linear(2, 2)
    for step in (1, 2, 3):
        checkpoint.save(tmp_path, model, step=step, keep=2)
    for path in tmp_path.glob("ckpt-*.pt"):
        _flip(path)
    originals = {p.name: p.read_bytes() for p in tmp_path.glob("ckpt-*.pt")}
    assert len(originals) == 2
    with pytest.warns(UserWarning, match="moved to"):
        for step in (4, 5, 6):
            checkpoint.save(tmp_path, model, step=step, keep=1)
    aside = {p.name: p.read_bytes() for p in (tmp_path / "corrupt").iterdir()}
    assert aside == originals  # every byte kept
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-000000006.pt"]


def test_ctrl_c_in_the_middle_of_writing_is_a_keyboard_interrupt_and_leaves_the_last_checkpoint(tmp_path,
                                                                                                 monkeypatch):
    """A SIGINT lands inside torch.save's zip writer: torch then fails closing the archive ("unexpected pos");
    the user must see the interrupt itself, and the folder must hold the previous checkpoint and no temp file."""
    from allgpu.checkpoint import format as fmt

    model = nn.Linear(500, 500)
    checkpoint.save(tmp_path, model, step=1)
    real_write, written = fmt._HashingWriter.write, []

    def interrupted(self, data):
        written.append(len(data))
        if sum(written) > 300_000:
            raise KeyboardInterrupt
        return real_write(self, data)

    monkeypatch.setattr(fmt._HashingWriter, "write", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        checkpoint.save(tmp_path, model, step=2)
    assert caught.value.__suppress_context__  # not "During handling ... RuntimeError: unexpected pos"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000001.pt"]
    assert checkpoint.latest_checkpoint(tmp_path).name == "ckpt-000000001.pt"
