"""The engine tier, submitit (facebookincubator/submitit, how DETR, DINO, MAE and ConvNeXt launch on Slurm): a real
``AutoExecutor`` with ``tasks_per_node=2`` on the local single-node Slurm, and on submitit's local executor, runs
docs/engines/slurm.md's training as a submitted function, written three ways: nothing Slurm-specific (the README
pattern); ``submitit.helpers.TorchDistributedEnvironment().export()`` first (DINO's, DETR's ``run_with_submitit``);
and MAE/ConvNeXt's ``init_distributed_mode`` SLURM_PROCID branch (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` set from
Slurm's, no ``MASTER_ADDR``). Each is one job of 2 replicas equal to one replica. A ``Checkpointable`` timed out
(submitit's own USR2 signal) is requeued by submitit and resumes from ``fit``'s checkpoint."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.engine_tier import job_env, require
from tests.slurm_local import LocalSlurm, missing_programs

pytestmark = [pytest.mark.engines, pytest.mark.timeout(300)]

JOBS = '''import os, time, torch, submitit

def train(out, mode, slow=None):
    import allgpu
    if mode == "export":  # DINO, DETR's run_with_submitit
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    elif mode == "mae":  # MAE / ConvNeXt / DeiT init_distributed_mode, its SLURM_PROCID branch
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    strategy = allgpu.MultiWorkerMirroredStrategy()
    data = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=data)
    y = (x.sum(dim=1) > 0).long()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), (x, y), epochs=2, global_batch_size=32,
               strategy=strategy, verbose=1, checkpoint_dir=slow and "checkpoints", checkpoint_every=2,
               callbacks=[slow] if slow else [])
    if strategy.is_chief:
        torch.save(model.state_dict(), out)
    return strategy.num_replicas_in_sync

class Trainer(submitit.helpers.Checkpointable):  # DETR's and DINO's: checkpoint() resubmits the same call
    def __call__(self, out):
        import allgpu
        class Slow(allgpu.Callback):
            def on_train_batch_end(self, step, logs):
                time.sleep(0.1)
        return train(out, "plain", Slow())
'''

SUBMIT = '''import sys, submitit, jobs
ex = submitit.AutoExecutor(folder="logs", cluster=sys.argv[1])
ex.update_parameters(tasks_per_node=2, nodes=1, timeout_min=5, cpus_per_task=1)
submitted = [ex.submit(jobs.train, f"model-{mode}.pt", mode) for mode in sys.argv[2:]]
print("replicas", [job.results() for job in submitted])
'''

REQUEUE = '''import os, time, submitit, jobs
ex = submitit.AutoExecutor(folder="logs", cluster="slurm")
ex.update_parameters(tasks_per_node=2, nodes=1, timeout_min=5, cpus_per_task=1)
job = ex.submit(jobs.Trainer(), "model-requeued.pt")
deadline = time.monotonic() + 120
while not (os.path.isdir("checkpoints") and os.listdir("checkpoints")) and time.monotonic() < deadline:
    time.sleep(0.2)
job._interrupt(timeout=True)  # submitit's own test hook: Slurm's timeout signal (USR2) to every task
print("replicas", job.results())
'''


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    require(not missing_programs(), "slurm-wlm and munge not installed (make engine-deps)")
    pytest.importorskip("submitit", reason="pip install -e '.[test]' installs submitit")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), cred_expire=10)  # a requeued job waits this long
    try:
        cluster.start()
    except (RuntimeError, OSError) as exc:
        cluster.stop()
        require(False, f"the local Slurm did not start: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory):
    d = tmp_path_factory.mktemp("one")
    (d / "jobs.py").write_text(JOBS)
    run = subprocess.run([sys.executable, "-c", "import jobs; jobs.train('model.pt', 'plain')"], cwd=d,
                         env=job_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return torch.load(d / "model.pt", weights_only=True)


def _submit(slurm, d, script, *args):
    (d / "jobs.py").write_text(JOBS)
    env = {**job_env(), "SLURM_CONF": slurm.env["SLURM_CONF"]}
    run = subprocess.run([sys.executable, "-c", script, *args], cwd=d, env=env, capture_output=True, text=True,
                         timeout=240)
    logs = "".join(p.read_text()[-2500:] for p in sorted((d / "logs").glob("*_log.*")))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:] + logs
    return run.stdout, logs


def _assert_equal(one_replica, path):
    got = torch.load(path, weights_only=True)
    for key in one_replica:
        torch.testing.assert_close(got[key], one_replica[key], rtol=1e-4, atol=1e-6)


def test_submitit_slurm_tasks_are_one_job_written_three_ways(slurm, one_replica, tmp_path):
    # mae: RANK/WORLD_SIZE/LOCAL_RANK without MASTER_ADDR was a ClusterConfigError telling to use torchrun
    out, logs = _submit(slurm, tmp_path, SUBMIT, "slurm", "plain", "export", "mae")
    assert "replicas [[2, 2], [2, 2], [2, 2]]" in out, out + logs
    for mode in ("plain", "export", "mae"):
        _assert_equal(one_replica, tmp_path / f"model-{mode}.pt")


def test_submitit_local_executor_tasks_are_one_job(one_replica, tmp_path):
    pytest.importorskip("submitit", reason="pip install -e '.[test]' installs submitit")
    (tmp_path / "jobs.py").write_text(JOBS)
    run = subprocess.run([sys.executable, "-c", SUBMIT, "local", "plain"], cwd=tmp_path, env=job_env(),
                         capture_output=True, text=True, timeout=240)
    # was [[1, 1]]: each task a one-replica job of its own, both training alone
    assert "replicas [[2, 2]]" in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]
    _assert_equal(one_replica, tmp_path / "model-plain.pt")


def test_submitit_checkpointable_timed_out_is_requeued_and_resumes(slurm, one_replica, tmp_path):
    out, logs = _submit(slurm, tmp_path, REQUEUE)
    assert "replicas [2, 2]" in out, out + logs
    assert "Requeued job" in logs and "resumed from" in logs, logs
    _assert_equal(one_replica, tmp_path / "model-requeued.pt")
