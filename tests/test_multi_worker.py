"""MultiWorkerMirroredStrategy and recovery on loopback: two launchers as two nodes, TF_CONFIG workers,
SIGKILL and hang of a replica mid-run with automatic resume and exact step and example accounting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import allgpu
from tests.harness import free_port

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, os, signal, sys, time
import torch
import allgpu
from allgpu.train.progress import Callback
from allgpu.train import fit
from tests.test_resume import Counting, dataset

out = sys.argv[1]
strategy = allgpu.MultiWorkerMirroredStrategy(num_replicas=int(os.environ.get("LOCAL_REPLICAS", "1")),
                                              timeout=float(os.environ.get("COLLECTIVE_TIMEOUT", "60")))

class Trouble(Callback):  # on the first attempt only, replica CRASH_RANK dies or hangs after CRASH_STEP steps
    count = 0
    def on_train_batch_end(self, step, logs):
        self.count += 1
        first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first and self.count == int(os.environ.get("CRASH_STEP", "0")) and \\
                strategy.replica_id_in_sync == int(os.environ["CRASH_RANK"]):
            if os.environ["CRASH_MODE"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)

torch.manual_seed(0)
with strategy.scope():
    model = Counting()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = fit(model, optimizer, torch.nn.CrossEntropyLoss(), dataset(), epochs=2, global_batch_size=8,
              strategy=strategy, checkpoint_dir=os.path.join(out, "ckpt"), checkpoint_every=1,
              callbacks=[Trouble()], verbose=False, num_workers=0)
if strategy.is_chief:
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"seen": model.seen.tolist(), "steps": model.steps.item(), "world": strategy.num_replicas_in_sync,
                   "worker": strategy.worker_index, "epochs": history.epoch,
                   "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                   "params": [p.detach().tolist() for p in model.linear.parameters()]}, f)
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TF_CONFIG")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _result(out):
    return json.loads((Path(out) / "result.json").read_text())


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    done = subprocess.run([sys.executable, str(_script(out)), str(out)], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return _result(out)


def _assert_exact(result, reference):
    assert result["seen"] == [2.0] * 64  # every example exactly once per epoch: none lost, none applied twice
    assert result["steps"] == 16 and result["epochs"] == [0, 1]
    for got, want in zip(result["params"], reference["params"]):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-6)


@pytest.mark.timeout(240)
def test_two_launchers_as_two_nodes_train_like_one_replica(tmp_path, one_replica):
    port = free_port()
    cmd = [sys.executable, "-m", "allgpu.cli.main", "run", "--nnodes", "2", "--cpu-replicas", "2",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes", str(_script(tmp_path)), str(tmp_path)]
    nodes = [subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=200)
        assert node.returncode == 0, err[-3000:]
    result = _result(tmp_path)
    assert result["world"] == 4
    _assert_exact(result, one_replica)


@pytest.mark.timeout(240)
def test_tf_config_workers_without_a_launcher(tmp_path, one_replica):
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen([sys.executable, str(_script(tmp_path)), str(tmp_path)],
                                      env=_env(TF_CONFIG=tf_config, LOCAL_REPLICAS=2), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=200)
        assert proc.returncode == 0, err[-3000:]
    result = _result(tmp_path)
    assert result["world"] == 4 and result["worker"] == 0
    _assert_exact(result, one_replica)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["kill", "hang"])
def test_a_replica_killed_or_hung_mid_epoch_restarts_and_resumes_exactly(tmp_path, one_replica, mode):
    done = subprocess.run(
        [sys.executable, "-m", "allgpu.cli.main", "run", "--cpu-replicas", "2", "--max-restarts", "1",
         str(_script(tmp_path)), str(tmp_path)],
        env=_env(CRASH_RANK=1, CRASH_STEP=11, CRASH_MODE=mode, COLLECTIVE_TIMEOUT=5),
        capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    result = _result(tmp_path)
    assert result["restart"] == 1 and result["world"] == 2
    _assert_exact(result, one_replica)


def test_malformed_tf_config_is_a_clear_error(monkeypatch):
    from allgpu.errors import ClusterConfigError

    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}')
    with pytest.raises(ClusterConfigError, match="index"):
        allgpu.MultiWorkerMirroredStrategy()
