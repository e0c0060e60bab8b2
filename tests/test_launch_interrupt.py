"""launch(fn) when Ctrl-C reaches a replica: torch's spawn wrapper ends an interrupted replica with exit code 0 and
no result, so `allgpu bench` interrupted mid-run got [None, ...] back from launch and failed later with
"TypeError: 'NoneType' object is not subscriptable". Now launch raises KeyboardInterrupt, as the function would."""

import os
import time

import pytest

import allgpu

pytestmark = pytest.mark.replicas  # starts 2 Gloo CPU replicas


def _interrupted_on_replica_1():
    if os.environ["RANK"] == "1":
        raise KeyboardInterrupt
    return 1


@pytest.mark.timeout(120)
def test_launch_raises_keyboard_interrupt_when_a_replica_was_interrupted():
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="replica 1 was interrupted"):
        allgpu.launch(_interrupted_on_replica_1, num_replicas=2, timeout=60)
    assert time.monotonic() - started < 60
