"""Checkpoints in one process: round trip, latest / keep K, corruption fallback, errors, RNG, background writes."""

from __future__ import annotations

import os
import random
import time
import warnings
from dataclasses import FrozenInstanceError
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from allgpu import checkpoint
from allgpu.checkpoint import store
from allgpu.checkpoint.format import HEADER_SIZE
from allgpu.errors import CheckpointError


def _model(hidden: int = 8) -> nn.Module:
    return nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def _trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        optimizer.step()
    return model, optimizer


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def _save_steps(directory: Path, steps, **kwargs) -> nn.Module:
    model, optimizer = _trained()
    for step in steps:
        with torch.no_grad():
            model[0].bias.fill_(float(step))  # each checkpoint distinguishable by its bias
        checkpoint.save(directory, model=model, optimizer=optimizer, step=step, **kwargs)
    return model


@pytest.mark.parametrize("sharded", [False, True])
def test_round_trip_model_optimizer_and_metadata(tmp_path, sharded):
    model, optimizer = _trained()
    path = checkpoint.save(
        tmp_path, model=model, optimizer=optimizer, epoch=2, step=30, sharded=sharded,
        data_state={"epoch": 2, "position": 96, "seed": 7}, extra={"note": "hello", "lr": [0.1, 0.01]},
    )
    assert path == tmp_path / ("ckpt-000000030" if sharded else "ckpt-000000030.pt")
    fresh, fresh_opt = _model(), None
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.5)
    state = checkpoint.restore(tmp_path, model=fresh, optimizer=fresh_opt)
    assert _same(model, fresh)
    want, got = optimizer.state_dict(), fresh_opt.state_dict()
    assert got["param_groups"] == want["param_groups"]  # lr 0.5 replaced by the saved 0.1
    for pid in want["state"]:
        for key in want["state"][pid]:
            assert torch.equal(got["state"][pid][key], want["state"][pid][key])
    assert (state.path, state.epoch, state.step, state.world_size_at_save) == (path, 2, 30, 1)
    assert state.data_state == {"epoch": 2, "position": 96, "seed": 7}
    assert state.extra == {"note": "hello", "lr": [0.1, 0.01]}
    with pytest.raises(FrozenInstanceError):
        state.step = 0  # type: ignore[misc]


def test_latest_is_highest_step_and_keep_prunes_older(tmp_path):
    assert checkpoint.latest_checkpoint(tmp_path / "missing") is None
    _save_steps(tmp_path, [1, 2, 10, 3], keep=2)  # step 3 written last, but 10 is the newest step
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-000000003.pt", "ckpt-000000010.pt"]
    assert checkpoint.latest_checkpoint(tmp_path) == tmp_path / "ckpt-000000010.pt"
    _save_steps(tmp_path / "all", [1, 2, 3, 4], keep=None)
    assert len(list((tmp_path / "all").iterdir())) == 4


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = HEADER_SIZE + (len(data) - HEADER_SIZE) // 2
    data[middle : middle + 4] = bytes(b ^ 0xFF for b in data[middle : middle + 4])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, reason", [(_truncate, "truncated"), (_flip, "sha256 mismatch")])
def test_corrupt_newest_file_falls_back_to_previous_with_warning(tmp_path, damage, reason):
    _save_steps(tmp_path, [1, 2])
    newest = tmp_path / "ckpt-000000002.pt"
    damage(newest)
    with pytest.warns(UserWarning, match=rf"ckpt-000000002\.pt.*{reason}.*previous"):
        assert checkpoint.latest_checkpoint(tmp_path) == tmp_path / "ckpt-000000001.pt"
    model = _model()
    with pytest.warns(UserWarning, match=rf"ckpt-000000002\.pt.*{reason}"):
        state = checkpoint.restore(tmp_path, model=model)
    assert state.step == 1 and model[0].bias[0].item() == 1.0
    with pytest.raises(CheckpointError, match=reason):  # asked for by name: no silent substitute
        checkpoint.restore(newest, model=_model())


def test_corrupt_sharded_member_falls_back(tmp_path):
    _save_steps(tmp_path, [1, 2], sharded=True)
    member = next((tmp_path / "ckpt-000000002").glob("*.distcp"))
    _flip(member)
    with pytest.warns(UserWarning, match=r"__0_0\.distcp: sha256 mismatch"):
        state = checkpoint.restore(tmp_path, model=_model())
    assert state.step == 1
    (tmp_path / "ckpt-000000001" / "MANIFEST").unlink()  # as if the write died before its last file
    with pytest.warns(UserWarning) as record, pytest.raises(CheckpointError, match="all 2 found are corrupt"):
        checkpoint.restore(tmp_path, model=_model())
    messages = [str(w.message) for w in record]
    assert any("ckpt-000000001: no MANIFEST" in m for m in messages), messages


def test_temporaries_and_foreign_files_are_never_taken(tmp_path):
    _save_steps(tmp_path, [1])
    (tmp_path / ".tmp-ckpt-000000009.pt-123-abc").write_bytes(b"half written")
    (tmp_path / "ckpt-000000008.pt").write_bytes(b"not a checkpoint at all, no header")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.warns(UserWarning, match="ckpt-000000008.pt"):
        assert checkpoint.latest_checkpoint(tmp_path) == tmp_path / "ckpt-000000001.pt"


def test_nothing_valid_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.restore(tmp_path / "nope", model=_model())
    with pytest.raises(CheckpointError, match="holds none"):
        checkpoint.restore(tmp_path, model=_model())


def test_model_that_does_not_fit_names_keys_and_fix(tmp_path):
    _save_steps(tmp_path, [1])
    other = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Linear(2, 2))
    with pytest.raises(CheckpointError, match=r"missing keys '3.bias', '3.weight'.*unexpected keys none.*strict=False"):
        checkpoint.restore(tmp_path, model=other)
    state = checkpoint.restore(tmp_path, model=other, strict=False)
    assert state.step == 1
    with pytest.raises(CheckpointError, match=r"size mismatch.*Fix"):
        checkpoint.restore(tmp_path, model=_model(hidden=16))
    wrapped = nn.Module()
    wrapped.module = _model()
    with pytest.raises(CheckpointError, match="'module.' prefix"):
        checkpoint.restore(tmp_path, model=wrapped)


def test_optimizer_that_does_not_fit_is_a_checkpoint_error(tmp_path):
    _save_steps(tmp_path, [1])
    model = _model()
    optimizer = torch.optim.Adam([{"params": [model[0].weight]}, {"params": [model[2].weight]}])
    with pytest.raises(CheckpointError, match="optimizer state does not fit Adam"):
        checkpoint.restore(tmp_path, model=model, optimizer=optimizer)


def test_unloadable_data_state_is_refused_at_save(tmp_path):
    model = _model()
    with pytest.raises(CheckpointError, match=r"data_state=\.\.\.\)\['order'\] is a numpy.ndarray"):
        checkpoint.save(tmp_path, model=model, data_state={"order": np.arange(3)})
    with pytest.raises(ValueError, match=r"keep=0"):
        checkpoint.save(tmp_path, model=model, keep=0)
    with pytest.raises(ValueError, match=r"step=-1"):
        checkpoint.save(tmp_path, model=model, step=-1)
    assert not list(tmp_path.iterdir())


def test_rng_states_resume_the_same_streams(tmp_path):
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    torch.randn(2), np.random.rand(), random.random()  # move off the seed
    checkpoint.save(tmp_path, model=_model(), step=1)
    expected = (torch.randn(4), np.random.rand(4), [random.random() for _ in range(4)])
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    state = checkpoint.restore(tmp_path, model=_model())
    checkpoint.restore_rng(state, 0)
    assert torch.equal(torch.randn(4), expected[0])
    assert np.array_equal(np.random.rand(4), expected[1])
    assert [random.random() for _ in range(4)] == expected[2]
    with pytest.warns(UserWarning, match="none for rank 1"):
        checkpoint.restore_rng(state, 1)
    checkpoint.save(tmp_path, model=_model(), step=2, rng=False)
    state = checkpoint.restore(tmp_path, model=_model())
    assert state.rng_states is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checkpoint.restore_rng(state, 0)  # nothing saved, nothing to say


def test_background_write_holds_the_state_at_save_time(tmp_path):
    model, optimizer = _trained()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    handle = checkpoint.save(tmp_path, model=model, optimizer=optimizer, step=5, blocking=False)
    with torch.no_grad():  # training continues while the file is written
        for param in model.parameters():
            param.mul_(0)
    assert handle.pause_s >= 0 and "ckpt-000000005.pt" in repr(handle)
    assert checkpoint.wait_pending() == [tmp_path / "ckpt-000000005.pt"]
    assert handle.done() and handle.wait() == tmp_path / "ckpt-000000005.pt"
    fresh = _model()
    checkpoint.restore(tmp_path, model=fresh)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in before.items())


def test_background_write_failure_surfaces_on_wait(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory is expected")
    with pytest.raises(CheckpointError, match="cannot be written"):  # not a raw OSError (issue 10)
        checkpoint.save(blocker, model=_model())
    (tmp_path / "squat").mkdir()
    handle = checkpoint.save(tmp_path / "squat", model=_model(), step=1, blocking=False)
    handle.wait()
    (tmp_path / "squat" / "ckpt-000000002.pt").mkdir()  # a folder squats on the next file's name
    checkpoint.save(tmp_path / "squat", model=_model(), step=2, blocking=False)
    with pytest.raises(CheckpointError, match="background write of checkpoint .*ckpt-000000002.pt failed"):
        checkpoint.wait_pending()


def test_stale_temporaries_of_crashed_writes_are_swept(tmp_path):
    stale = tmp_path / ".tmp-ckpt-000000004.pt-999-deadbeef"
    fresh = tmp_path / ".tmp-ckpt-000000005.pt-999-cafebabe"  # may be a write in progress elsewhere
    stale.write_bytes(b"x"), fresh.write_bytes(b"x")
    old = time.time() - 2 * store.STALE_TEMP_SECONDS
    os.utime(stale, (old, old))
    checkpoint.save(tmp_path, model=_model(), step=6)
    assert not stale.exists() and fresh.exists()


def _lbfgs_trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(1)
    model = _model()
    optimizer = torch.optim.LBFGS(model.parameters(), history_size=3, max_iter=4)
    x = torch.randn(5, 4)

    def closure():
        optimizer.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return model, optimizer


@pytest.mark.parametrize("sharded", [False, True])
def test_optimizer_with_non_tensor_state_and_same_step_resave(tmp_path, sharded):
    # LBFGS keeps ints and lists of tensors in its state: they travel in MANIFEST, not through DCP.
    model, optimizer = _lbfgs_trained()
    checkpoint.save(tmp_path, model=_model(), step=4, sharded=sharded)  # replaced by the next save
    checkpoint.save(tmp_path, model=model, optimizer=optimizer, step=4, sharded=sharded)
    fresh = _model()
    fresh_opt = torch.optim.LBFGS(fresh.parameters(), history_size=3, max_iter=4)
    checkpoint.restore(tmp_path, model=fresh, optimizer=fresh_opt)
    assert _same(model, fresh)
    want, got = optimizer.state_dict()["state"][0], fresh_opt.state_dict()["state"][0]
    assert want.keys() == got.keys() and want["n_iter"] == got["n_iter"] == 4
    for a, b in zip(want["old_dirs"], got["old_dirs"], strict=True):
        assert torch.equal(a, b)
    assert len(store.entries(tmp_path)) == 1
