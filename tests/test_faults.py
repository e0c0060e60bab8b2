"""Issue 10: fault injection on Gloo CPU replicas started by a plain `python train.py`. A replica SIGKILLed or
SIGSTOPped (frozen, not dead) at start-up, mid-epoch, inside a checkpoint save and inside evaluation: the job
ends within timeout + 10 s, names the replica, and the newest checkpoint on disk stays loadable."""

from __future__ import annotations

import time

import pytest
import torch

from allgpu import checkpoint
from tests.harness import start_python, write_script

pytestmark = pytest.mark.replicas

TIMEOUT_S = 15  # the rendezvous shares it: replica start-up (import torch) on a loaded 2-core machine

SCRIPT = """
import os, signal, sys, torch, allgpu
from torch.utils.data import Dataset, TensorDataset
import allgpu.checkpoint.api as api

mode, where = sys.argv[1], sys.argv[2]
sig = signal.SIGKILL if mode == "kill" else signal.SIGSTOP
me = os.environ.get("RANK", "0")

def fault(at):
    if where == at and me == "1":
        print(f"fault {mode} at {at}", flush=True)
        os.kill(os.getpid(), sig)

if where == "start":
    fault("start")
strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"], timeout=TIMEOUT, fallback="error")

saves = [0]
gather = api.collective.all_gather
def gather_in_save(obj, group=None):  # the RNG-state gather that every replica makes inside checkpoint.save
    saves[0] += 1
    if saves[0] == 3:
        fault("save")
    return gather(obj, group)
api.collective.all_gather = gather_in_save

class Evaluated(Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        fault("eval")
        return torch.zeros(4), 0

class Midway(allgpu.Callback):
    def __init__(self):
        self.count = 0
    def on_train_batch_end(self, step, logs):
        self.count += 1
        if self.count == 6:
            fault("epoch")

torch.manual_seed(0)
with strategy.scope():
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=3, global_batch_size=16, strategy=strategy,
           checkpoint_dir=sys.argv[3], checkpoint_every=2, validation_data=Evaluated() if where == "eval" else None,
           callbacks=[Midway()], verbose=False, num_workers=0, metrics=())
print("finished", flush=True)
""".replace("TIMEOUT", str(TIMEOUT_S))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, where", [("kill", "epoch"), ("stop", "epoch"), ("kill", "save"), ("stop", "eval"),
                                         ("stop", "start")])
def test_a_killed_or_frozen_replica_ends_the_job_in_time_naming_it(tmp_path, mode, where):
    script = write_script(tmp_path, "train.py", SCRIPT)
    proc = start_python([str(script), mode, where, str(tmp_path / "ckpt")], cwd=tmp_path, stderr="merge")
    seen, faulted = [], None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("fault"):
            faulted = time.monotonic()
            break
    assert faulted is not None, "".join(seen)
    rest = proc.communicate(timeout=TIMEOUT_S + 40)[0]
    took = time.monotonic() - faulted
    out = "".join(seen) + rest
    assert proc.returncode != 0 and "finished" not in out
    assert took < TIMEOUT_S + 10, (took, out[-3000:])
    assert "replica 1" in out, out[-3000:]
    newest = checkpoint.latest_checkpoint(tmp_path / "ckpt")
    if newest is not None:  # whatever was written is whole
        checkpoint.restore(newest, torch.nn.Linear(4, 2), torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=1))
