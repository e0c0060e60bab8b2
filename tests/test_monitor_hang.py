"""Hangs, explained: SIGUSR1 on a replica stuck in a collective names the replica it waits for."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

import allgpu
from allgpu.errors import ReplicaFailedError
from allgpu.core.ledger import Entry
from allgpu.monitor import install_hang_dump
from allgpu.monitor.hang import behind_verdict

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _replica_one_skips_a_reduce(pid_dir: str, timeout: float):
    strategy = allgpu.MirroredStrategy(timeout=timeout)
    install_hang_dump(strategy)
    strategy.reduce("sum", 1.0)
    Path(pid_dir, f"replica-{strategy.replica_id_in_sync}").write_text(str(os.getpid()))
    if strategy.replica_id_in_sync == 0:
        strategy.reduce("sum", 2.0)  # SKIPPED_REDUCE: replica 1 never makes this call
    else:
        time.sleep(timeout + 4)  # alive but elsewhere: only the timeout can end replica 0's wait
    return "finished"


def _signal_when_stuck(pid_dir: Path, delay_s: float, sent: list):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(list(pid_dir.iterdir())) < 2:
        time.sleep(0.05)
    time.sleep(delay_s)  # replica 0 is now blocked inside the Gloo all-reduce
    os.kill(int((pid_dir / "replica-0").read_text()), signal.SIGUSR1)  # replica 0 passes it on to replica 1
    sent.append(time.monotonic())


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line and "def " not in line)


@pytest.mark.timeout(60)
def test_sigusr1_to_replica_0_makes_every_replica_report_then_the_timeout_names_the_culprit(tmp_path, capfd):
    timeout = 4.0
    sent: list = []
    thread = threading.Thread(target=_signal_when_stuck, args=(tmp_path, 1.0, sent), daemon=True)
    thread.start()
    start = time.monotonic()
    with pytest.raises(ReplicaFailedError) as info:
        allgpu.launch(_replica_one_skips_a_reduce, num_replicas=2, args=(str(tmp_path), timeout), timeout=timeout)
    elapsed = time.monotonic() - start
    thread.join(5)
    err = capfd.readouterr().err
    assert len(sent) == 1

    # The dump came while replica 0 was still stuck, long before the timeout.
    first_line = _line_of("strategy.reduce(\"sum\", 1.0)")
    skipped_line = _line_of("SKIPPED_REDUCE")
    zero = err[err.index("hang report from replica 0"):]
    zero = zero[: zero.index("\nallgpu: hang report from replica 1")] if "hang report from replica 1" in zero else zero
    assert "replica 0 waited" in zero and f"all_reduce(sum) [[]] at test_monitor_hang.py:{skipped_line}" in zero
    assert f"replica 1 is behind, at collective #3 all_reduce(sum) [[]] at test_monitor_hang.py:{first_line}" in zero
    assert "verdict: replica 1 is behind" in zero
    assert "this replica's main thread is at:" in zero and "_run" in zero

    one = err[err.index("hang report from replica 1"):]
    assert "replica 1 is not in a collective" in one and "replica 0 is ahead" in one
    assert "time.sleep" in one  # where replica 1 really is
    view = err[err.index("job view from replica 0"):]
    # No step monitor here, so the step is unknown ("?").
    assert f"replica 0: step ?, waiting in collective #4 all_reduce(sum), at test_monitor_hang.py:{skipped_line}" in view
    assert "verdict: replica 1 is not in the collective that replica(s) 0 wait in" in view

    # And the timeout still fires, naming replica 1, the collective and the line, within timeout + 10 s.
    assert elapsed < timeout + 10
    text = info.value.remote_traceback or str(info.value)
    assert "CollectiveTimeoutError" in text and "all_reduce(sum)" in text
    assert f"replica 1 is behind" in text and f"test_monitor_hang.py:{first_line}" in text


def _entry(seq, op="all_reduce(sum)", where="train.py:10"):
    return Entry(seq, op, [[3]], where, 7, 0.0)


def test_verdict_names_replicas_behind_and_diverged():
    assert behind_verdict({0: _entry(5), 1: _entry(5)}) .startswith("verdict: every replica is at collective #5")
    text = behind_verdict({0: _entry(5), 1: _entry(4, where="train.py:9"), 2: None})
    assert "replica 1 is behind (its last was collective #4" in text and "train.py:9" in text
    assert "replica 2 is behind (it has issued no collective)" in text
    text = behind_verdict({0: _entry(5), 1: _entry(5, op="broadcast(src=0)")})
    assert "replica 1 diverged: collective #5 broadcast(src=0)" in text


def test_install_outside_the_main_thread_is_refused():
    errors = []
    thread = threading.Thread(target=lambda: _catch(errors))
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]


def _catch(errors):
    try:
        install_hang_dump(allgpu.OneDeviceStrategy("/cpu:0"))
    except RuntimeError as exc:
        errors.append(str(exc))


def _replica_one_skips_a_backward(pid_dir: str, timeout: float):
    import torch

    from allgpu.monitor import StepMonitor

    strategy = allgpu.MirroredStrategy(timeout=timeout)
    install_hang_dump(strategy)
    with strategy.scope():
        model = torch.nn.Linear(4, 1)
    monitor = StepMonitor(strategy)
    for step in range(3):
        monitor.start_step()
        if step == 2:
            Path(pid_dir, f"replica-{strategy.replica_id_in_sync}").write_text(str(os.getpid()))
            if strategy.replica_id_in_sync == 1:
                time.sleep(timeout + 4)  # replica 1 never makes step 2's backward
        with monitor.phase("compute"):
            model(torch.ones(2, 4)).sum().backward()
        monitor.end_step(samples=2)
    return "finished"


@pytest.mark.timeout(60)
def test_sigusr1_during_a_gradient_all_reduce_says_so(tmp_path, capfd):
    sent: list = []
    thread = threading.Thread(target=_signal_when_stuck, args=(tmp_path, 1.0, sent), daemon=True)
    thread.start()
    with pytest.raises(ReplicaFailedError):
        allgpu.launch(_replica_one_skips_a_backward, num_replicas=2, args=(str(tmp_path), 3.0), timeout=3.0)
    thread.join(5)
    err = capfd.readouterr().err
    zero = err[err.index("hang report from replica 0"):]
    assert "replica 0 is waiting for the gradient all-reduce at the end of loss.backward() (step 3" in zero
    assert "_finalize" in zero
    one = err[err.index("hang report from replica 1"):]
    assert "replica 1 is not in a collective" in one and "time.sleep" in one
    view = err[err.index("job view from replica 0"):]
    assert "replica 0: step 3, waiting for the gradient all-reduce" in view
    assert "replica 1: step 3, not in a collective" in view and "verdict: replica 1 is not in the collective" in view
