"""Starting replicas from the places a user runs Python interactively: a notebook kernel (``allgpu.launch``),
IPython's ``%run``, a script that reads standard input. Each is a correct run or a typed allgpu error or warning
naming why and the fix; never a hang, a replica left behind, or a second interactive session."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.harness import run_python, start_python, write_script

pytestmark = pytest.mark.timeout(120)


@pytest.mark.replicas
def test_launch_after_a_one_replica_strategy_in_the_same_kernel(tmp_path):
    """A notebook's flow: MirroredStrategy() on a machine without a GPU (one replica, on allgpu's world-of-one
    process group), then allgpu.launch(train, num_replicas=2). The forked replicas inherited the group without its
    Gloo threads and waited forever at their first collective; now 2 replicas run, and the kernel's one-replica
    strategy still works afterwards."""
    script = write_script(tmp_path, "kernel.py", """
        import allgpu, torch, torch.distributed as dist
        first = allgpu.MirroredStrategy(devices=["/cpu:0"])

        def train():
            strategy = allgpu.MirroredStrategy()
            return strategy.reduce("sum", torch.ones(1)).item()

        print("replicas", allgpu.launch(train, num_replicas=2), flush=True)
        print("after", dist.get_world_size(), first.reduce("sum", torch.ones(1)).item(), flush=True)
    """)
    result = run_python([str(script)], timeout=90, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "replicas [2.0, 2.0]" in result.stdout
    assert "after 1 1.0" in result.stdout


@pytest.mark.replicas
def test_launch_replicas_end_when_the_kernel_is_killed(tmp_path):
    """A kernel restarted or killed (SIGKILL: no finally runs) left its forked replicas training on, orphaned, when
    they handle SIGINT (torch's parent-death signal for them), e.g. to save a checkpoint on Ctrl-C."""
    script = write_script(tmp_path, "kernel.py", """
        import os, signal, time, allgpu

        def train():
            signal.signal(signal.SIGINT, lambda *_: print("Ctrl-C: saving a checkpoint", flush=True))
            print("replica pid", os.getpid(), flush=True)
            time.sleep(300)

        allgpu.launch(train, num_replicas=2)
    """)
    kernel = start_python([str(script)], cwd=tmp_path)
    pids = []
    try:
        while len(pids) < 2:
            line = kernel.stdout.readline()
            assert line, "the launcher ended before its replicas started"
            if line.startswith("replica pid"):
                pids.append(int(line.split()[-1]))
        kernel.kill()
        kernel.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in pids), "replicas outlived the killed kernel"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
