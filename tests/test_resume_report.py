"""Issue 10, item 4: fit says what it resumed (or skipped, and why) on every start; a checkpoint from another
model or optimizer is an error naming the keys, never a silent resume."""

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import allgpu
from allgpu.errors import CheckpointError


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _fit(directory, epochs, model=None, optimizer_cls=torch.optim.SGD, **kwargs):
    torch.manual_seed(0)
    model = model or nn.Linear(3, 2)
    opt = optimizer_cls(model.parameters(), lr=0.1)
    return allgpu.fit(model, opt, nn.CrossEntropyLoss(), _data(), epochs=epochs, global_batch_size=8,
                      checkpoint_dir=directory, num_workers=0, metrics=(), **kwargs)


def test_every_start_says_what_was_resumed_and_warns_when_nothing_is_left(tmp_path, capsys):
    _fit(tmp_path, 2)
    assert f"no checkpoint to resume in {tmp_path}: starting from scratch" in capsys.readouterr().out
    _fit(tmp_path, 3)
    out = capsys.readouterr().out
    assert "resumed from" in out and "ckpt-000000008.pt" in out and "2 epochs done, 8 optimizer steps" in out
    with pytest.warns(RuntimeWarning, match=r"fit\(epochs=2\) has nothing to train: .* already holds 3 epochs"):
        _fit(tmp_path, 2)


def test_a_corrupt_newest_checkpoint_is_named_as_skipped(tmp_path, capsys):
    _fit(tmp_path, 2)
    newest = tmp_path / "ckpt-000000008.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    with pytest.warns(UserWarning):
        _fit(tmp_path, 2)
    out = capsys.readouterr().out
    assert "resumed from" in out and "ckpt-000000004.pt" in out
    assert "skipped ckpt-000000008.pt" in out and "moved to corrupt/" in out
    assert (tmp_path / "corrupt" / "ckpt-000000008.pt").exists()  # moved aside by the next save, not deleted


def test_a_checkpoint_from_another_model_is_an_error_naming_keys(tmp_path):
    _fit(tmp_path, 1)
    other = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    with pytest.raises(CheckpointError, match=r"not saved from this model.*missing keys '0.bias'.*resume=False"):
        _fit(tmp_path, 2, model=other, verbose=False)


def test_a_checkpoint_from_another_optimizer_is_an_error_naming_keys(tmp_path):
    _fit(tmp_path, 1, optimizer_cls=lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9))
    with pytest.raises(CheckpointError, match=r"different optimizer than Adam.*'momentum'.*'betas'"):
        _fit(tmp_path, 2, optimizer_cls=torch.optim.Adam, verbose=False)
