"""Checkpoints of FullyShardedStrategy models: sharded on save, restorable at any replica count and strategy."""

import os

import pytest
import torch

import allgpu
from allgpu import checkpoint
from tests.fsdp_models import TiedNet, make_data

pytestmark = pytest.mark.replicas

STRATEGIES = {
    "sharded": lambda: allgpu.FullyShardedStrategy(),
    "mirrored": lambda: allgpu.MirroredStrategy(),
    "one_device": lambda: allgpu.OneDeviceStrategy("/cpu:0"),
}


def _steps(strategy, model, optimizer, first, count):
    """Train on global batches ``first .. first + count - 1`` of a fixed order (independent of replica count)."""
    data = strategy.distribute_dataset(make_data(), 32, seed=7, num_workers=0)
    for i, (x, y) in enumerate(data):
        if i >= first + count:
            break
        if i >= first:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()


def _full(strategy, model):
    if isinstance(strategy, allgpu.FullyShardedStrategy):
        return strategy.full_state_dict(model)
    return {k: v.detach().clone() for k, v in model.state_dict().items()} if strategy.is_chief else {}


def _run(kind, directory, restore, save, sharded_file=True):
    """Build, optionally restore from ``directory``, train 5 steps, optionally save; return the full state."""
    strategy = STRATEGIES[kind]()
    torch.manual_seed(1)
    with strategy.scope():
        model = TiedNet()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = 0
    if restore:
        state = checkpoint.restore(directory, model, optimizer)
        first = state.step
    _steps(strategy, model, optimizer, first, 5)
    files = None
    if save:
        path = checkpoint.save(directory, model, optimizer, step=first + 5, sharded=sharded_file)
        files = sorted(os.listdir(path)) if path.is_dir() else [path.name]
    return _full(strategy, model), files


@pytest.fixture(scope="module")
def saved_on_four(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fsdp4")
    results = allgpu.launch(_run, num_replicas=4, args=("sharded", str(directory), False, True))
    reference = allgpu.launch(_run, num_replicas=1, args=("sharded", str(tmp_path_factory.mktemp("x")), False, False))
    return directory, results, reference[0][0]


@pytest.mark.timeout(300)
def test_save_on_four_writes_one_shard_per_replica(saved_on_four):
    directory, results, _ = saved_on_four
    files = results[0][1]
    assert [f for f in files if f.endswith(".distcp")] == [f"__{r}_0.distcp" for r in range(4)]
    folder = checkpoint.latest_checkpoint(directory)
    sizes = [os.path.getsize(folder / f"__{r}_0.distcp") for r in range(4)]
    assert max(sizes) < 0.6 * sum(sizes)  # spread over the replicas, not gathered on one


def _continued(kind, directory):
    return _run(kind, directory, True, False)[0]


def _uninterrupted(kind):
    strategy = STRATEGIES[kind]()
    torch.manual_seed(1)
    with strategy.scope():
        model = TiedNet()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    _steps(strategy, model, optimizer, 0, 10)
    return _full(strategy, model)


@pytest.fixture(scope="module")
def ten_steps():
    return allgpu.launch(_uninterrupted, num_replicas=1, args=("sharded",))[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind, replicas", [("sharded", 2), ("sharded", 1), ("mirrored", 2), ("one_device", 1)])
def test_restore_saved_on_four_continues_identically(saved_on_four, ten_steps, tmp_path, kind, replicas):
    directory, _, _ = saved_on_four
    if kind == "one_device":
        full = _continued(kind, str(directory))
    else:
        full = allgpu.launch(_continued, num_replicas=replicas, args=(kind, str(directory)))[0]
    assert set(full) == set(ten_steps)
    for key in ten_steps:
        torch.testing.assert_close(full[key], ten_steps[key], rtol=1e-4, atol=1e-6)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sharded_file", [True, False])
def test_mirrored_checkpoint_restores_into_sharded_and_back(ten_steps, tmp_path, sharded_file):
    allgpu.launch(_run, num_replicas=2, args=("mirrored", str(tmp_path), False, True, sharded_file))
    full = allgpu.launch(_continued, num_replicas=2, args=("sharded", str(tmp_path)))[0]
    for key in ten_steps:
        torch.testing.assert_close(full[key], ten_steps[key], rtol=1e-4, atol=1e-6)


def _save_in_background(directory):
    """Save after 5 steps without blocking, then train on (changing every shard in place) while it writes."""
    strategy = allgpu.FullyShardedStrategy()
    torch.manual_seed(1)
    with strategy.scope():
        model = TiedNet()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    _steps(strategy, model, optimizer, 0, 5)
    import threading

    from allgpu.checkpoint import api

    trained, write = threading.Event(), api.sharded.save
    api.sharded.save = lambda *a, **k: (trained.wait(60), write(*a, **k))  # the write starts after the 3 steps
    pending = checkpoint.save(directory, model, optimizer, step=5, blocking=False)
    _steps(strategy, model, optimizer, 5, 3)
    trained.set()
    return pending.wait().name, pending.pause_s


@pytest.mark.timeout(300)
def test_a_background_save_of_a_sharded_model_holds_the_state_when_it_was_called(ten_steps, tmp_path):
    name, pause_s = allgpu.launch(_save_in_background, num_replicas=2, args=(str(tmp_path),))[0]
    assert name == checkpoint.latest_checkpoint(tmp_path).name and pause_s >= 0
    full = allgpu.launch(_continued, num_replicas=2, args=("sharded", str(tmp_path)))[0]
    for key in ten_steps:  # 5 saved + 5 after restore == 10 uninterrupted: the 3 steps during the write are not in it
        torch.testing.assert_close(full[key], ten_steps[key], rtol=1e-4, atol=1e-6)


def _export(directory):
    strategy = allgpu.FullyShardedStrategy()
    torch.manual_seed(1)
    with strategy.scope():
        model = TiedNet()
    full = strategy.full_state_dict(model)
    if strategy.is_chief:
        torch.save(full, os.path.join(directory, "export.pt"))
    return sorted(full)


@pytest.mark.timeout(120)
def test_full_state_dict_exports_a_plain_state_dict_on_replica_zero(tmp_path):
    keys = allgpu.launch(_export, num_replicas=2, args=(str(tmp_path),))
    assert keys[1] == []
    plain = TiedNet()
    plain.load_state_dict(torch.load(tmp_path / "export.pt", weights_only=True))
    assert sorted(plain.state_dict()) == keys[0]


KILLED_RUN = """
import os, signal, sys
import torch
import allgpu
from allgpu.train.progress import Callback
sys.path.insert(0, {repo!r})
from tests.fsdp_models import TiedNet, make_data

out, kill = sys.argv[1], sys.argv[2] == "kill"


class KillOnce(Callback):
    def __init__(self):
        self.count = 0

    def on_train_batch_end(self, step, logs):
        self.count += 1
        marker = os.path.join(out, "killed")
        if kill and self.count == 7 and os.environ["RANK"] == "1" and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # mid-epoch: resumes from step 6


strategy = allgpu.FullyShardedStrategy()
torch.manual_seed(0)
with strategy.scope():
    model = TiedNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
counter = KillOnce()
allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), make_data(), epochs=1, global_batch_size=32,
           strategy=strategy, checkpoint_dir=os.path.join(out, "ckpt"), checkpoint_every=3, callbacks=[counter],
           verbose=False, num_workers=0)
full = strategy.full_state_dict(model)
if strategy.is_chief:
    torch.save({{"state": full, "batches": counter.count}}, os.path.join(out, "final.pt"))
"""


@pytest.mark.timeout(300)
def test_run_killed_mid_epoch_resumes_exactly_under_allgpu_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "train.py"
    script.write_text(KILLED_RUN.format(repo=str(Path(__file__).resolve().parents[1])))
    finals = {}
    for mode in ("kill", "clean"):
        out = tmp_path / mode
        out.mkdir()
        result = subprocess.run([sys.executable, "-m", "allgpu.cli.main", "run", "--cpu-replicas", "2",
                                 "--max-restarts", "1", str(script), str(out), mode],
                                capture_output=True, text=True, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
        finals[mode] = torch.load(out / "final.pt", weights_only=True)
    assert (tmp_path / "kill" / "killed").exists()
    assert finals["clean"]["batches"] == 10 and finals["kill"]["batches"] == 4  # the restart resumed at step 6
    for key, value in finals["clean"]["state"].items():
        torch.testing.assert_close(finals["kill"]["state"][key], value, rtol=1e-5, atol=1e-6)
