"""The exit path waits for Gloo's worker threads (allgpu/runtime/gloo_drain.py): a real Gloo group, with a worker
held busy by a future callback, which runs on the worker thread that completes the collective."""

import pytest

from tests.harness import run_python

pytestmark = pytest.mark.replicas

SCRIPT = r'''
import threading, time, torch, torch.distributed as dist
from allgpu.runtime.gloo_drain import _gloo_workers, wait_for_gloo_workers

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
deadline = time.monotonic() + 10  # each worker names itself once it starts: on a loaded machine, a moment later
while not _gloo_workers() and time.monotonic() < deadline:
    time.sleep(0.01)
print("workers", len(_gloo_workers()))          # torch names them pt_gloo_runloop: the drain finds them by name
print("idle", wait_for_gloo_workers(timeout_s=2.0))

started, inline = threading.Event(), threading.Event()

def spin(fut):  # on the Gloo worker, holds it busy for 1 s
    if threading.current_thread() is threading.main_thread():
        inline.set()  # the collective had already completed, so torch ran the callback at once, here
        return fut.value()
    started.set()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    return fut.value()

for attempt in range(200):  # until a callback lands on the worker (on a loaded machine, order varies)
    inline.clear()
    done = dist.all_reduce(torch.ones(4), async_op=True).get_future().then(spin)
    if not inline.is_set():
        break
started.wait(30)  # the worker is really busy now
time.sleep(0.05)
start = time.monotonic()
print("busy", wait_for_gloo_workers(timeout_s=0.2), round(time.monotonic() - start, 1))
done.wait()
print("after", wait_for_gloo_workers(timeout_s=2.0))
'''


def test_drain_finds_gloo_workers_and_waits_while_one_runs():
    proc = run_python(["-c", SCRIPT], timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert int(lines["workers"]) >= 1
    assert lines["idle"] == "True"
    busy, waited = lines["busy"].split()
    assert busy == "False" and 0.2 <= float(waited) < 0.9  # gave up at its timeout, not after the callback
    assert lines["after"] == "True"
