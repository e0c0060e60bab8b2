"""A writer killed with SIGKILL in the middle of a save never leaves a checkpoint that gets picked."""

from __future__ import annotations

import signal
import textwrap
import time

import pytest
import torch
from torch import nn

from allgpu import checkpoint
from allgpu.checkpoint import store
from tests.harness import start_python

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

# Saves a ~100 MB state (model + Adam) over and over, so a kill lands mid-write.
_WRITER = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    from allgpu import checkpoint
    model = nn.Sequential(nn.Linear(1024, 2048), nn.Linear(2048, 4096))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 1024)).sum().backward()
    optimizer.step()
    for step in range(1, 1000):
        checkpoint.save(sys.argv[1], model=model, optimizer=optimizer, step=step, keep=2, sharded=sys.argv[2] == "1")
        print(step, flush=True)
    """
)


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(1024, 2048), nn.Linear(2048, 4096))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sharded", [False, True])
def test_sigkill_mid_write_leaves_only_verified_checkpoints(tmp_path, sharded):
    proc = start_python(["-c", _WRITER, str(tmp_path), "1" if sharded else "0"], env={"PYTHONWARNINGS": "ignore"},
                        stderr="inherit")
    try:
        assert proc.stdout.readline().strip() == "1", "the writer did not complete its first checkpoint"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until a write is under way, then kill without warning
            if any(p.name.startswith(".tmp-") for p in tmp_path.iterdir()):
                break
            time.sleep(0.001)
        else:
            pytest.fail("never saw a write in progress")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    final = store.entries(tmp_path)
    assert final, "the first checkpoint must survive"
    for entry in final:
        store.verify(entry.path)  # every entry under a final name is complete
    latest = checkpoint.latest_checkpoint(tmp_path)
    assert latest == final[0].path
    model = _model()
    state = checkpoint.restore(tmp_path, model=model, optimizer=torch.optim.Adam(model.parameters()))
    assert state.path == latest and state.step == final[0].step
    # The half-written temp (if the kill beat the rename) is ignored now and swept up by a later save after an hour.
    assert all(not store.is_checkpoint(p) for p in leftovers if p.is_dir())
    print(f"killed mid-write: {len(leftovers)} temporaries left, latest {latest.name}")
