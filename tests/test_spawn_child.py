"""A strategy created in a process that ``torch.multiprocessing.spawn`` started (pytorch/examples' imagenet
``--multiprocessing-distributed`` flow, ported by replacing ``init_process_group`` with ``MirroredStrategy()``) cannot
start replicas by re-executing its command line, which is multiprocessing's. Before, each re-executed copy died
with a bare ``OSError: [Errno 9] Bad file descriptor`` and the spawned process fell back to one replica, once per
spawned process: separate trainings. Now a ``StrategyStartError`` names the three fixes."""

import pytest

from tests.harness import run_python

pytestmark = pytest.mark.replicas

SCRIPT = """
import torch.multiprocessing as mp
import allgpu

def main_worker(gpu):
    strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])   # fallback="one_device", the default
    print("replicas", strategy.num_replicas_in_sync, flush=True)

if __name__ == "__main__":
    mp.spawn(main_worker, nprocs=1)
"""


@pytest.mark.timeout(120)
def test_a_strategy_in_a_spawned_process_is_refused_with_the_fixes(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    result = run_python([str(script)], cwd=tmp_path, timeout=100)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "replicas 1" not in out, out
    assert "Bad file descriptor" not in out, out
    assert "StrategyStartError" in out and "torch.multiprocessing.spawn" in out, out
    assert "allgpu.launch(fn" in out and "init_process_group(rank=i" in out, out
