"""Replicas that run different numbers of steps, launch-free (``python train.py``), as pytorch/tutorials'
generic_join example does without its ``Join`` (replica 1 has one input more than replica 0).

Before: replica 0 finished its script and stayed alive (it watches its replicas and hosts the job's store), so its
Gloo connections stayed open and replica 1 waited in its extra backward's all-reduce for the whole timeout (30 min
by default; under torchrun replica 0's exit closed them and the error came in seconds). And a replica that failed
while replica 0 was ending let ``python train.py`` exit with status 0."""

import time

import pytest

pytestmark = pytest.mark.replicas

UNEVEN = """
import torch, allgpu
strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"], timeout=90)
rank = strategy.replica_id_in_sync
with strategy.scope():
    model = torch.nn.Linear(1, 1)
for _ in range(3 + rank):  # replica 1: one step more
    model(torch.ones(1)).sum().backward()
print(f"replica {rank} done", flush=True)
"""

LATE_FAILURE = """
import time, allgpu
strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
if strategy.replica_id_in_sync == 1:
    time.sleep(3)  # replica 0 has finished its script meanwhile
    raise ValueError("replica 1 fails late")
"""


def test_an_extra_step_on_one_replica_names_the_replica_that_left_within_seconds(run_script):
    start = time.monotonic()
    done = run_script(UNEVEN, timeout=150)
    elapsed = time.monotonic() - start
    assert done.returncode == 1, done.stdout + done.stderr
    assert "replica 0 done" in done.stdout and "replica 1 done" not in done.stdout
    assert "replica 0 has ended: it left the job" in done.stderr
    assert "uneven numbers of batches" in done.stderr
    assert elapsed < 60, elapsed  # was: the 90 s timeout, then the exit hung on the blocked Gloo thread


def test_a_replica_failing_after_replica_0_finished_fails_the_job(run_script):
    done = run_script(LATE_FAILURE, timeout=100)
    assert done.returncode == 1, done.stderr
    assert "replica 1 fails late" in done.stderr
