"""``torch.multiprocessing.spawn`` kept from a DDP script whose ``init_process_group`` was dropped (pytorch/examples'
ddp-tutorial-series ``multigpu.py`` ported by half), on a machine where ``MirroredStrategy()`` finds one device:
before, each spawned process trained a model of its own with only a "found no GPU" warning (the two printed
different gradients); now a StrategyStartError naming the fixes. Kept: ``devices=[...]`` given explicitly keeps a
one-replica run per process (``init_process_group`` first joins that group, as before: a path this check is not on)."""

import re

import pytest

pytestmark = pytest.mark.replicas

SCRIPT = """
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp, allgpu

def main(rank, world_size, how):
    if how == "init":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    strategy = allgpu.MirroredStrategy(**({"devices": ["/cpu:0"]} if how == "explicit" else {}))
    with strategy.scope():
        model = torch.nn.Linear(4, 1)
    torch.manual_seed(rank)
    model(torch.randn(8, 4)).sum().backward()
    print(f"process {rank}: {strategy.num_replicas_in_sync} replicas, grad {model.weight.grad.sum().item():.6f}",
          flush=True)
    strategy.close()

if __name__ == "__main__":
    mp.spawn(main, args=(2, sys.argv[1]), nprocs=2)
"""


def test_spawned_workers_without_a_group_are_refused_not_trained_alone(run_script):
    done = run_script(SCRIPT, "none", "0")
    assert done.returncode != 0
    assert "StrategyStartError" in done.stderr and "torch.multiprocessing.spawn" in done.stderr
    assert "init_process_group(rank=i, world_size=N)" in done.stderr
    alone = run_script(SCRIPT, "explicit", "0")
    assert alone.returncode == 0, alone.stderr
    assert len(re.findall(r"process \d: 1 replicas", alone.stdout)) == 2
