"""The engine tier, Slurm: a real single-node Slurm on localhost (munged, slurmctld, slurmd from Debian's
slurm-wlm and munge), started once for the module. docs/engines/slurm.md's train.py and batch script run as a
user runs them (2 tasks with the WORLD_SIZE / MASTER_ADDR / MASTER_PORT exports of HPC centres' DDP batch
scripts); 2 and 4 tasks end with one replica's parameters; scancel mid-epoch then a resubmitted job
resumes exactly; a task killed with SIGKILL ends the step, named, within 30 s."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.engine_tier import doc_blocks, job_env, require
from tests.slurm_local import LocalSlurm, missing_programs

pytestmark = [pytest.mark.engines, pytest.mark.timeout(300)]

TRAIN = doc_blocks("slurm.md", "python")[0]
SBATCH, LAUNCHER = doc_blocks("slurm.md", "bash")[:2]
# The same train.py made slow (0.15 s a step) and leaving each replica's pid, so a test can act mid-epoch.
SLOW = ("import os, time, allgpu\n"
        "class Slow(allgpu.Callback):\n"
        "    def on_train_batch_end(self, step, logs):\n"
        "        open(f\"pid-{os.environ.get('SLURM_PROCID', '0')}\", 'w').write(str(os.getpid()))\n"
        "        time.sleep(0.15)\n" + TRAIN.replace("verbose=1)", "verbose=1, callbacks=[Slow()])"))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = missing_programs()
    require(not missing, f"{', '.join(missing)} not installed (make engine-deps: apt-get install slurm-wlm munge)")
    require(os.geteuid() == 0, "the local Slurm runs its daemons as root")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except (RuntimeError, OSError) as exc:
        cluster.stop()
        require(False, f"the local Slurm did not start: {exc}")
    yield cluster
    cluster.stop()


def _job_dir(tmp_path, name, script=TRAIN):
    d = tmp_path / name
    d.mkdir()
    (d / "train.py").write_text(script)
    (d / "train.sbatch").write_text(SBATCH)
    return d


def _sbatch(slurm, d, ntasks, *, wait=True):
    cmd = ["sbatch", "--parsable", f"--ntasks={ntasks}", f"--ntasks-per-node={ntasks}", "-o", "out.txt"]
    result = slurm.run(*cmd, *(["--wait"] if wait else []), "train.sbatch", cwd=d, env=job_env(), timeout=240)
    out = (d / "out.txt").read_text() if (d / "out.txt").exists() else ""
    return result, out


HPC_EXPORTS = """export MASTER_PORT={port}
export WORLD_SIZE=$(($SLURM_NNODES * $SLURM_NTASKS_PER_NODE))
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun python"""


def _free_port() -> int:
    from tests.harness import job_port

    return job_port()


def _params(path):
    return torch.load(path, weights_only=True)


@pytest.fixture(scope="module")
def srun_params(slurm, tmp_path_factory):
    """The doc's job's parameters with n tasks (0: plain `python train.py`), each run once for the module."""
    done: dict[int, dict] = {}

    def params(n: int) -> dict:
        if n not in done:
            # 4 tasks run the page's script with its other spelling, MirroredStrategy(): it joins the step too
            script = TRAIN.replace("MultiWorkerMirroredStrategy()", "MirroredStrategy()") if n == 4 else TRAIN
            d = _job_dir(tmp_path_factory.mktemp(f"tasks{n}"), "job", script)
            if n == 2:  # HPC centres' DDP batch scripts export these around srun (no RANK: each task's is Slurm's)
                (d / "train.sbatch").write_text(SBATCH.replace("srun python", HPC_EXPORTS.format(port=_free_port())))
            if n == 0:
                one = subprocess.run([sys.executable, "train.py"], cwd=d, env=job_env(), capture_output=True,
                                     text=True, timeout=120)
                assert one.returncode == 0, one.stderr[-3000:]
            else:
                result, out = _sbatch(slurm, d, n)
                assert result.returncode == 0, result.stderr + out[-4000:] + slurm.logs()
                assert "found no GPU" not in out, out[-3000:]  # joined the step: not n silent one-replica jobs
            done[n] = _params(d / "model.pt")
        return done[n]

    return params


def test_srun_2_and_4_tasks_are_one_job_equal_to_one_replica(srun_params):
    reference = srun_params(0)
    for n in (2, 4):
        got = srun_params(n)
        for key in reference:
            torch.testing.assert_close(got[key], reference[key], rtol=1e-4, atol=1e-6)


def test_scancel_mid_epoch_then_resubmitted_job_resumes_exactly(slurm, srun_params, tmp_path):
    from allgpu.checkpoint import latest_checkpoint

    d = _job_dir(tmp_path, "cancelled", SLOW)
    result, _ = _sbatch(slurm, d, 2, wait=False)
    job = result.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while latest_checkpoint(d / "checkpoints") is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert latest_checkpoint(d / "checkpoints") is not None, (d / "out.txt").read_text()[-3000:]
    assert slurm.run("scancel", job).returncode == 0
    slurm.wait_job_gone(job)
    assert not (d / "model.pt").exists(), "the job finished before scancel: nothing was resumed"
    kept = latest_checkpoint(d / "checkpoints")
    assert kept is not None  # the last complete checkpoint survived SIGTERM/SIGKILL
    result, out = _sbatch(slurm, d, 2)  # resubmitted: same script, same directory
    assert result.returncode == 0, out[-3000:]
    want, got = srun_params(2), _params(d / "model.pt")  # the same job never cancelled (Slow only sleeps)
    for key in want:
        assert torch.equal(want[key], got[key]), (key, (want[key] - got[key]).abs().max())


def test_a_task_killed_with_sigkill_ends_the_step_named_within_30s(slurm, tmp_path):
    d = _job_dir(tmp_path, "killed", SLOW)
    step = subprocess.Popen(["srun", "-n", "2", "python", "train.py"], cwd=d, env={**job_env(), **slurm.env,
                            "PATH": job_env()["PATH"]}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (d / "pid-1").exists() and time.monotonic() < deadline and step.poll() is None:
            time.sleep(0.2)
        assert (d / "pid-1").exists(), step.communicate(timeout=30)[0][-3000:]
        os.kill(int((d / "pid-1").read_text()), signal.SIGKILL)
        killed_at = time.monotonic()
        out, _ = step.communicate(timeout=60)
        took = time.monotonic() - killed_at
    finally:
        if step.poll() is None:
            step.kill()
    assert step.returncode != 0
    assert took < 30, f"the step took {took:.0f} s to end after a task died:\n{out[-3000:]}"
    assert "task 1" in out and slurm.host in out, out[-3000:]


def test_srun_one_allgpu_run_launcher_per_node_keeps_working(slurm, srun_params, tmp_path):
    port = _free_port()
    d = _job_dir(tmp_path, "launcher")
    script = LAUNCHER.replace("allgpu run ", "allgpu run --cpu-replicas 2 ").replace(":29400", f":{port}")
    (d / "train.sbatch").write_text(script)
    result = slurm.run("sbatch", "--parsable", "--wait", "-o", "out.txt", "train.sbatch", cwd=d, env=job_env(),
                       timeout=240)
    out = (d / "out.txt").read_text() if (d / "out.txt").exists() else ""
    assert result.returncode == 0, result.stderr + out[-4000:]
    got, want = _params(d / "model.pt"), srun_params(0)
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-6)


# Tasks 0 and 1 as one node, task 2 as another: SLURM_GTIDS (the tasks slurmstepd started on the node) is what
# tells a task its node's others, so task 2 cannot see task 1 and learns of it through the job's store.
NODE_SPLIT = ('if [ "$SLURM_PROCID" = 2 ]; then export SLURM_GTIDS=2 SLURMD_NODENAME=other; '
              'else export SLURM_GTIDS=0,1; fi; exec python train.py')


def test_a_task_that_fails_before_the_rendezvous_ends_the_others_naming_it(slurm, tmp_path):
    # The page's train.py with an error on task 1 before the strategy (a file missing on one node): srun's default
    # keeps the other tasks running, which waited at the rendezvous until the timeout (1800 s); now its node's
    # tasks see it gone (scontrol listpids) and post it in the job's store for the other nodes' tasks.
    d = _job_dir(tmp_path, "early", "import os\nif os.environ['SLURM_PROCID'] == '1':\n"
                 "    raise FileNotFoundError('data/train.bin')\n" + TRAIN)
    step = subprocess.run(["srun", "-n", "3", "bash", "-c", NODE_SPLIT], cwd=d, env={**job_env(), **slurm.env,
                          "PATH": job_env()["PATH"]}, capture_output=True, text=True, timeout=150)
    out = step.stdout + step.stderr
    assert step.returncode != 0, out[-3000:]
    assert "FileNotFoundError: data/train.bin" in out, out[-3000:]
    for task, words in ((0, f"on {slurm.host} ended before joining the job ("),
                        (2, f"on {slurm.host} ended before joining the job, seen by its node's other tasks")):
        assert re.search(rf"ReplicaFailedError: task 1 of Slurm step \d+\.0 {re.escape(words)}.*task {task} stops "
                         "instead of waiting", out), out[-3000:]
    assert "DistNetworkError" not in out, out[-3000:]  # no bare backend error when replica 0's store goes
    assert not (d / "model.pt").exists()


# Task 0 alone on one node, tasks 1 and 2 on another (SLURM_GTIDS, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE as a
# two-node srun gives them; both "nodes" are this machine, so `srun --overlap -w <first node>` reaches the real one).
FIRST_NODE_SPLIT = ('export SLURM_STEP_NODELIST={host},other SLURM_STEP_TASKS_PER_NODE=1,2 SLURM_STEP_NUM_NODES=2; '
                    'if [ "$SLURM_PROCID" = 0 ]; then '
                    'export SLURM_GTIDS=0; else export SLURM_GTIDS=1,2 SLURM_NODEID=1 SLURMD_NODENAME=other; fi; '
                    'exec python train.py')


def test_task_0_failing_alone_on_its_node_ends_the_other_nodes_tasks_naming_it(slurm, tmp_path):
    # Nobody is left on task 0's node to see it, and the store it would host never comes: the others waited until
    # the timeout (1800 s). Now the first task of the other node asks the first node (srun --overlap ... scontrol
    # listpids), and its node's other task follows it.
    d = _job_dir(tmp_path, "first", "import os\nif os.environ['SLURM_PROCID'] == '0':\n"
                 "    raise FileNotFoundError('data/train.bin')\n" + TRAIN)
    start = time.monotonic()
    split = FIRST_NODE_SPLIT.format(host=slurm.host)
    step = subprocess.run(["srun", "-n", "3", "bash", "-c", split], cwd=d, env={**job_env(), **slurm.env,
                          "PATH": job_env()["PATH"]}, capture_output=True, text=True, timeout=150)
    took, out = time.monotonic() - start, step.stdout + step.stderr
    assert step.returncode != 0 and "FileNotFoundError: data/train.bin" in out, out[-3000:]
    assert re.search(rf"ReplicaFailedError: task 0 of Slurm step \d+\.0 on {re.escape(slurm.host)} ended before "
                     r"joining the job, seen from other \(`srun --overlap .*task 1 stops instead of waiting", out), \
        out[-3000:]
    assert re.search(r"ReplicaFailedError: task 0 of Slurm step .*task 2 stops instead of waiting", out), out[-3000:]
    assert took < 60, f"{took:.0f} s:\n{out[-3000:]}"


# Tasks 0 and 1 on a first node named "head" (the rendezvous on this machine through MASTER_ADDR/MASTER_PORT), task 2
# alone on this machine's node as the second: task 0 asks that node with `srun --overlap -w <this node>`.
OTHER_NODE_SPLIT = ('export SLURM_STEP_NODELIST=head,{host} SLURM_STEP_TASKS_PER_NODE=2,1 SLURM_STEP_NUM_NODES=2 '
                    'MASTER_ADDR=127.0.0.1 MASTER_PORT={port}; if [ "$SLURM_PROCID" = 2 ]; then export SLURM_GTIDS=2 '
                    'SLURM_NODEID=1; else export SLURM_GTIDS=0,1 SLURM_NODEID=0 SLURMD_NODENAME=head; fi; '
                    'exec python train.py')


def test_a_node_whose_tasks_all_fail_is_seen_by_task_0_and_posted(slurm, tmp_path):
    # Every task of a node other than the first failed before the rendezvous: nobody there to see it, the store is
    # up, and the others waited until the timeout. Now task 0 asks each node none of whose tasks reached its store.
    d = _job_dir(tmp_path, "node", "import os\nif os.environ['SLURM_PROCID'] == '2':\n"
                 "    raise FileNotFoundError('data/train.bin')\n" + TRAIN)
    split = OTHER_NODE_SPLIT.format(host=slurm.host, port=_free_port())
    start = time.monotonic()
    step = subprocess.run(["srun", "-n", "3", "bash", "-c", split], cwd=d, env={**job_env(), **slurm.env,
                          "PATH": job_env()["PATH"]}, capture_output=True, text=True, timeout=150)
    took, out = time.monotonic() - start, step.stdout + step.stderr
    assert step.returncode != 0 and "FileNotFoundError: data/train.bin" in out, out[-3000:]
    for task in (0, 1):
        assert re.search(rf"ReplicaFailedError: task 2 of Slurm step \d+\.0 on {re.escape(slurm.host)} ended before "
                         rf"joining the job, seen by task 0 \(`srun --overlap .*task {task} stops instead of waiting",
                         out), out[-3000:]
    assert took < 60, f"{took:.0f} s:\n{out[-3000:]}"
