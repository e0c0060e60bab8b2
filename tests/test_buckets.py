"""Gradient buckets are laid out as DDP lays them out, checked against DDP's own assignment function."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from allgpu.core.replica_group import ReplicaGroup
from allgpu.core.sync import FIRST_BUCKET_BYTES, GradientSync

MODELS = {
    "mlp_1m": lambda: nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(),
                                    nn.Linear(256, 10)),
    "many_small": lambda: nn.Sequential(*[nn.Linear(64, 64) for _ in range(40)]),
    "one_huge": lambda: nn.Sequential(nn.Linear(4096, 2048), nn.Linear(2048, 8)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cap_mb", [0.25, 1.0, 25.0])
def test_buckets_match_ddp_assignment(name, cap_mb):
    params = [p for p in MODELS[name]().parameters()]
    sync = GradientSync(ReplicaGroup.single(torch.device("cpu")), bucket_cap_mb=cap_mb)
    sync.add(params)
    cap = int(cap_mb * 1024 * 1024)
    # DDP hands its reducer the parameters in reverse order, with the caps [first bucket, every later one].
    reversed_params = list(reversed(params))
    expected, _ = dist._compute_bucket_assignment_by_size(reversed_params, [min(FIRST_BUCKET_BYTES, cap), cap])
    index = {id(p): i for i, p in enumerate(reversed_params)}
    got = [[index[id(p)] for p in bucket.params] for bucket in sync.buckets]
    assert got == [list(b) for b in expected]
