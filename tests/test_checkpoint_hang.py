"""A replica that never reaches a checkpoint save is named like one that skips a training collective: checkpoint
collectives go through the same ledger (issue 9)."""

import time

import pytest
import torch

import allgpu
from allgpu.errors import ReplicaFailedError

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _replica_one_skips_the_save(folder):
    strategy = allgpu.MirroredStrategy(timeout=3)
    with strategy.scope():
        model = torch.nn.Linear(4, 2)
    strategy.reduce("sum", 1.0)
    if strategy.replica_id_in_sync == 0:
        allgpu.checkpoint.save(folder, model=model, step=1)
    else:
        time.sleep(8)  # alive but elsewhere: the timeout must name it
    return "finished"


@pytest.mark.timeout(90)
def test_a_replica_missing_from_a_checkpoint_save_is_named(tmp_path):
    start = time.monotonic()
    with pytest.raises(ReplicaFailedError) as info:
        allgpu.launch(_replica_one_skips_the_save, num_replicas=2, args=(str(tmp_path),), timeout=3)
    assert time.monotonic() - start < 3 + 15
    text = info.value.remote_traceback
    assert "CollectiveTimeoutError" in text
    assert "all_gather_object" in text and "checkpoint" in text
    assert "replica 1 is behind" in text
    assert not list(tmp_path.glob("ckpt-*")), "no half-written checkpoint may be left as a checkpoint"
