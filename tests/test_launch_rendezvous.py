"""``allgpu.launch``'s rendezvous: the port is held by the launcher from its choice until the replicas are done."""

import os
import socket

import pytest
import torch

import allgpu

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _port_taken_then_reduce():
    port = int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        try:  # another program trying the port before any replica joined: before, it was free for it to take
            other.bind(("127.0.0.1", port))
            taken = False
        except OSError:
            taken = True
    strategy = allgpu.MirroredStrategy()
    total = strategy.reduce("sum", torch.tensor(float(strategy.replica_id_in_sync + 1)))
    return taken, float(total), port


@pytest.mark.timeout(120)
def test_launch_holds_its_rendezvous_port_from_the_start_and_frees_it_after():
    results = allgpu.launch(_port_taken_then_reduce, num_replicas=2, timeout=60)
    assert [r[:2] for r in results] == [(True, 3.0), (True, 3.0)]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as after:
        after.bind(("127.0.0.1", results[0][2]))  # released once launch() returned
