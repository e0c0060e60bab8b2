"""The launch-free rendezvous port is held from the moment replica 0 chooses it (no release-then-bind race)."""

import shutil
import socket
from datetime import timedelta

import pytest
import torch.distributed as dist

from allgpu.devices import Device
from allgpu.runtime.replicas import ScriptReplicas

pytestmark = pytest.mark.unit


def test_the_port_given_to_the_replicas_stays_bound_until_rank_0_joins_on_it():
    replicas = ScriptReplicas([Device("cpu", 0), Device("cpu", 1)], 30.0)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", replicas.port))  # another program cannot take it before init_process_group
        # Rank 0 joins through the same tcp:// address its replicas are given, reusing the held server.
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{replicas.port}", rank=0, world_size=1,
                                timeout=timedelta(seconds=30))
        replicas.joined()
        assert dist.get_world_size() == 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(replicas.error_dir, ignore_errors=True)


def test_a_worker_of_a_multi_worker_job_uses_the_chiefs_port_and_holds_none():
    replicas = ScriptReplicas([Device("cpu", 0)], 30.0, rank_offset=2, world_size=4, master_port=29999)
    try:
        assert replicas.port == 29999 and replicas._store is None
    finally:
        shutil.rmtree(replicas.error_dir, ignore_errors=True)
