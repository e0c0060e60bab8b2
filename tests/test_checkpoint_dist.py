"""Checkpoints across real Gloo processes: save from 4 replicas, restore in 2 and in 1, exactly."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from allgpu import checkpoint
from tests.harness import free_port as _free_port

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

STEPS = 5


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def _init(rank: int, world: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )


def _train_and_save(rank: int, world: int, port: int, directory: str) -> None:
    """Mirrored training by hand (average gradients), then every kind of save."""
    _init(rank, world, port)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(100 + rank)  # each replica its own data and RNG stream, as in real data parallelism
    for _ in range(STEPS):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
        optimizer.step()
    root = Path(directory)
    if rank == 0:  # reference copy, written by plain torch.save, to compare restores against
        torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, root / "reference.pth")
    rng_before = torch.get_rng_state()
    checkpoint.save(root / "single", model=model, optimizer=optimizer, epoch=1, step=STEPS, data_state={"position": 40})
    checkpoint.save(root / "sharded", model=model, optimizer=optimizer, epoch=1, step=STEPS, sharded=True)
    handle = checkpoint.save(root / "async", model=model, optimizer=optimizer, step=STEPS, sharded=True, blocking=False)
    # Training goes on while the background write runs; the checkpoint must hold the pre-update state.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    assert handle.wait() == root / "async" / f"ckpt-{STEPS:09d}"
    checkpoint.wait_pending()
    torch.save(rng_before, root / f"rng-{rank}.pth")
    dist.destroy_process_group()


def _restore_and_compare(rank: int, world: int, port: int, directory: str) -> None:
    if world > 1:
        _init(rank, world, port)
    root = Path(directory)
    reference = torch.load(root / "reference.pth", weights_only=True)
    for kind in ("single", "sharded", "async"):
        model = _model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        state = checkpoint.restore(root / kind, model=model, optimizer=optimizer)
        assert state.step == STEPS and state.world_size_at_save == 4, (kind, state)
        for name, value in reference["model"].items():
            assert torch.equal(model.state_dict()[name], value), (kind, name)
        got = optimizer.state_dict()
        assert got["param_groups"] == reference["optim"]["param_groups"], kind
        assert got["state"].keys() == reference["optim"]["state"].keys(), kind
        for pid, entries in reference["optim"]["state"].items():
            for key, value in entries.items():
                assert torch.equal(got["state"][pid][key], value), (kind, pid, key)
        assert len(state.rng_states) == 4
        checkpoint.restore_rng(state, rank)
        assert torch.equal(torch.get_rng_state(), torch.load(root / f"rng-{rank}.pth", weights_only=True)), kind
    single = checkpoint.restore(root / "single", model=_model())
    assert single.data_state == {"position": 40} and single.epoch == 1
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_save_on_4_replicas_restore_on_2_and_1(tmp_path):
    mp.spawn(_train_and_save, args=(4, _free_port(), str(tmp_path)), nprocs=4, join=True)
    for kind in ("single", "sharded", "async"):
        assert checkpoint.latest_checkpoint(tmp_path / kind) is not None, kind
    # Sharded: the mirrored tensors were spread over the ranks, not all written by rank 0.
    written = [p for p in (tmp_path / "sharded" / f"ckpt-{STEPS:09d}").glob("__*_*.distcp") if p.stat().st_size > 0]
    assert len({p.name.split("_")[2] for p in written}) >= 2, sorted(p.name for p in written)
    mp.spawn(_restore_and_compare, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    _restore_and_compare(0, 1, 0, str(tmp_path))


def _failing_save(rank: int, world: int, port: int, directory: str) -> None:
    _init(rank, world, port)
    (Path(directory) / "ckpt-000000003.pt").mkdir(exist_ok=True)  # squats on the file rank 0 will write
    try:
        checkpoint.save(directory, model=_model(), step=3)
    except (checkpoint.CheckpointError, OSError) as exc:
        if rank != 0:  # the replicas that did not write learn who failed, instead of waiting in a barrier
            assert isinstance(exc, checkpoint.CheckpointError) and "replica 0 failed" in str(exc), exc
    else:
        raise AssertionError("save should have failed on every replica")
    dist.destroy_process_group()


@pytest.mark.timeout(60)
def test_write_failure_on_replica_0_is_raised_on_every_replica(tmp_path):
    mp.spawn(_failing_save, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)  # asserts in each replica
    assert not [p for p in tmp_path.iterdir() if p.is_file()]  # the failed write left no file behind
