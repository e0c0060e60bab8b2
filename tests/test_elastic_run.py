"""`allgpu run` with real processes on loopback: CPU replicas on Gloo, two launchers as two nodes, a
restart after SIGKILL, a failing replica's exit code and traceback, TF_CONFIG nodes; plus option checks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from allgpu.runtime.elastic import parse_nnodes, plan, resolve_nproc
from tests.harness import free_port, run_cli, start_cli, write_script as write
from allgpu.errors import ClusterConfigError, DeviceError

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

ALLREDUCE = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
record = {"rank": rank, "world": world, "sum": total.item(), "local_rank": int(os.environ["LOCAL_RANK"]),
          "device": os.environ.get("ALLGPU_DEVICE"), "source": os.environ.get("ALLGPU_CLUSTER_SOURCE"),
          "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"]), "master": os.environ["MASTER_ADDR"]}
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    f.write(__import__("json").dumps(record))
dist.destroy_process_group()
"""

KILL_ONCE = """
import os, signal, sys
marker = os.path.join(sys.argv[1], "killed")
if os.environ["RANK"] == "1" and not os.path.exists(marker):
    open(marker, "w").close()
    os.kill(os.getpid(), signal.SIGKILL)  # first attempt only: dies before the collective
""" + ALLREDUCE

FAIL = """
import torch.distributed as dist
dist.init_process_group("gloo")
def load_batch():
    raise ValueError("corrupt shard 7")
if dist.get_rank() == 1:
    load_batch()
dist.barrier()
"""


def allgpu_run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_cli("run", *args, env=env, timeout=timeout)


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return start_cli("run", *args, env=env)


def records(out: Path) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda r: r["rank"])


@pytest.mark.timeout(60)
def test_cpu_replicas_all_reduce(tmp_path):
    script = write(tmp_path, "train.py", ALLREDUCE)
    result = allgpu_run("--cpu-replicas", "2", str(script), str(tmp_path))
    assert result.returncode == 0, result.stderr
    recs = records(tmp_path)
    assert [r["rank"] for r in recs] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 3.0 and r["device"] == "cpu" for r in recs)
    assert all(r["master"] == "127.0.0.1" for r in recs)  # loopback unless an endpoint is given


@pytest.mark.timeout(90)
def test_two_launchers_are_two_nodes(tmp_path):
    script = write(tmp_path, "train.py", ALLREDUCE)
    args = ["--nnodes", "2", "--nproc-per-node", "2", "--cpu-replicas", "2",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "two-nodes", str(script), str(tmp_path)]
    nodes = [start(*args), start(*args)]
    outputs = [p.communicate(timeout=80)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    recs = records(tmp_path)
    assert [r["rank"] for r in recs] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 1 + 2 + 3 + 4 for r in recs)
    assert sorted(r["local_rank"] for r in recs) == [0, 0, 1, 1]


LATE_WORKER_NODE = """
import os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and int(os.environ["RANK"]) >= 2:
    # the worker node reads the store address of attempt 0 only once the chief has begun attempt 1 (its rank 0,
    # the host of attempt 0's store, is gone): as when its replicas start a few seconds late on a loaded machine
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(sys.argv[1], "attempt1")) and time.monotonic() < deadline:
        time.sleep(0.05)
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "1" and os.environ["RANK"] == "0":
    open(os.path.join(sys.argv[1], "attempt1"), "w").close()
""" + KILL_ONCE


def tf_config_run(tmp_path, code: str, timeout: float = 80) -> tuple[dict[str, str], dict[str, int]]:
    """Chief and worker nodes from one TF_CONFIG, 2 CPU replicas each, ``--max-restarts 1``: their outputs and
    exit codes."""
    script = write(tmp_path, "train.py", code)
    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    procs = {
        role: start("--tf-config", "--cpu-replicas", "2", "--max-restarts", "1", str(script), str(tmp_path),
                    env={"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}})})
        for role in ("worker", "chief")  # the worker starts first, yet the chief is node 0
    }
    try:
        outputs = {role: p.communicate(timeout=timeout)[0] for role, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return outputs, {role: p.returncode for role, p in procs.items()}


def tf_config_nodes(tmp_path, code: str) -> dict[str, str]:
    """:func:`tf_config_run` where both nodes must succeed; their outputs."""
    outputs, codes = tf_config_run(tmp_path, code)
    assert all(code == 0 for code in codes.values()), outputs
    return outputs


@pytest.mark.timeout(90)
def test_tf_config_nodes_follow_task_order_and_restart(tmp_path):
    # static rendezvous (fixed node ranks): replica 1 on the chief is SIGKILLed once; both nodes restart
    tf_config_nodes(tmp_path, KILL_ONCE)
    recs = records(tmp_path)
    assert [r["rank"] for r in recs] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 10.0 and r["source"] == "TF_CONFIG" for r in recs)
    assert all(r["restart"] == 1 for r in recs)


@pytest.mark.timeout(90)
def test_tf_config_node_that_reads_a_finished_attempt_restarts_too(tmp_path):
    # The hang of 2026-11-23: the worker node's replicas looked up attempt 0's store after the chief had stopped
    # its host, then retried that dead port for 30 min while the chief's attempt 1 waited for them.
    outputs = tf_config_nodes(tmp_path, LATE_WORKER_NODE)
    recs = records(tmp_path)
    assert [r["rank"] for r in recs] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 10.0 and r["restart"] == 1 for r in recs)
    assert "ends attempt 0: another node restarted the job (attempt 1 began there)" in outputs["worker"]


FAILS_AFTER_THE_CHIEF_FINISHED = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
if os.environ["RANK"] == "2" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    while not all(os.path.exists(os.path.join(sys.argv[1], f"done{r}")) for r in (0, 1)):
        time.sleep(0.05)
    raise RuntimeError("the worker's last step failed")
open(os.path.join(sys.argv[1], f"done{os.environ['RANK']}"), "w").close()
"""


@pytest.mark.timeout(90)
def test_tf_config_node_that_restarts_after_the_chief_finished_says_why(tmp_path):
    # The chief's replicas finished; the worker's replica 2 then fails and its node restarts. The chief cannot
    # follow (its launcher restarts nothing once its replicas succeeded): the worker's attempt 1 used to wait for
    # them 300 s, then end with a store timeout; now it says why at once and the chief's launcher ends too.
    outputs, codes = tf_config_run(tmp_path, FAILS_AFTER_THE_CHIEF_FINISHED, timeout=70)
    assert codes == {"worker": 1, "chief": 0}, outputs
    summary = outputs["worker"][outputs["worker"].index("allgpu run: replica"):]
    assert "RestartError: node 1 (replicas 2-3) began restart attempt 1, but node 0 (replicas 0-1" in summary
    assert "had already finished cleanly in attempt 0" in summary and "make every replica reach the same end" in summary
    assert "Traceback" not in summary


@pytest.mark.timeout(60)
def test_sigkill_restarts_the_job(tmp_path):
    script = write(tmp_path, "train.py", KILL_ONCE)
    result = allgpu_run("--cpu-replicas", "2", "--max-restarts", "1", str(script), str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "killed").exists()
    recs = records(tmp_path)
    assert [r["rank"] for r in recs] == [0, 1]
    assert all(r["restart"] == 1 and r["sum"] == 3.0 for r in recs)


@pytest.mark.timeout(60)
def test_sigkill_without_restarts_reports_the_signal(tmp_path):
    script = write(tmp_path, "train.py", KILL_ONCE)
    result = allgpu_run("--cpu-replicas", "2", str(script), str(tmp_path))
    assert result.returncode == 128 + 9
    assert "replica 1 (local rank 1" in result.stderr and "SIGKILL" in result.stderr


@pytest.mark.timeout(60)
def test_failure_names_replica_and_shows_traceback(tmp_path):
    script = write(tmp_path, "train.py", FAIL)
    result = allgpu_run("--cpu-replicas", "2", str(script))
    assert result.returncode == 1
    summary = result.stderr[result.stderr.index("allgpu run: replica 1"):]
    assert "failed with exit code 1" in summary
    assert "Traceback of replica 1:" in summary
    assert "in load_batch" in summary and "ValueError: corrupt shard 7" in summary


@pytest.mark.timeout(60)
def test_script_exit_code_is_returned(tmp_path):
    script = write(tmp_path, "train.py", "import os, sys\nsys.exit(3 if os.environ['RANK'] == '0' else 0)\n")
    result = allgpu_run("--cpu-replicas", "2", str(script))
    assert result.returncode == 3, result.stderr
    assert "replica 0" in result.stderr and "exit code 3" in result.stderr


# Option checks: no processes.

def test_parse_nnodes():
    assert parse_nnodes("2") == (2, 2) and parse_nnodes("1:4") == (1, 4) and parse_nnodes(3) == (3, 3)
    for bad in ("0", "4:2", "a", "1:2:3", ""):
        with pytest.raises(ClusterConfigError, match="--nnodes"):
            parse_nnodes(bad)


def test_resolve_nproc():
    assert resolve_nproc("auto", 3) == (3, True)
    assert resolve_nproc("2", 2) == (2, True)
    assert resolve_nproc("4", None) == (4, False)
    with pytest.raises(DeviceError, match="disagrees"):
        resolve_nproc("4", 2)
    with pytest.raises(DeviceError, match="positive integer"):
        resolve_nproc("0", None)
    with pytest.raises(DeviceError, match="--cpu-replicas"):
        resolve_nproc("auto", 0)


def test_auto_without_gpu_asks_for_cpu_replicas(tmp_path):
    import torch

    if torch.cuda.device_count():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceError, match="--cpu-replicas K"):
        resolve_nproc("auto", None)
    result = allgpu_run(str(write(tmp_path, "t.py", "")), timeout=30)
    assert result.returncode == 2 and "no visible GPU" in result.stderr


def test_plan_defaults_and_errors(tmp_path, monkeypatch):
    script = str(write(tmp_path, "t.py", ""))
    p = plan(script, ["--lr", "0.1"], cpu_replicas=2)
    assert (p.rdzv_backend, p.rdzv_endpoint, p.local_addr) == ("c10d", "127.0.0.1:0", "127.0.0.1")
    assert p.argv[-3:] == (script, "--lr", "0.1") and p.worker_env == {"ALLGPU_DEVICE": "cpu"}
    config = p.launch_config()
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node, config.max_restarts) == (1, 1, 2, 0)
    with pytest.raises(ClusterConfigError, match="--rdzv-endpoint HOST:PORT"):
        plan(script, nnodes="2", cpu_replicas=1)
    with pytest.raises(ClusterConfigError, match="--rdzv-endpoint"):
        plan(script, nnodes="2", cpu_replicas=1, rdzv_endpoint="host-without-port")
    with pytest.raises(ClusterConfigError, match="fixed node count"):
        plan(script, nnodes="1:2", node_rank=0, rdzv_endpoint="h:1", cpu_replicas=1)
    with pytest.raises(FileNotFoundError, match="nope.py"):
        plan(str(tmp_path / "nope.py"), cpu_replicas=1)
    static = plan(script, nnodes="2", node_rank=1, rdzv_endpoint="h:29400", cpu_replicas=1)
    assert static.rdzv_backend == "static" and static.launch_config().rdzv_configs["rank"] == 1
    assert static.worker_env["ALLGPU_FRESH_STORE"] == "1"
    env = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:5", "b:5"]}, "task": {"type": "worker", "index": 1}})}
    t = plan(script, tf_config=True, cpu_replicas=1, env=env)
    assert (t.max_nodes, t.node_rank, t.rdzv_endpoint, t.rdzv_backend) == (2, 1, "a:5", "static")
    with pytest.raises(ClusterConfigError, match="contradicts TF_CONFIG"):
        plan(script, tf_config=True, cpu_replicas=1, nnodes="3", env=env)
    with pytest.raises(ClusterConfigError, match="TF_CONFIG is unset"):
        plan(script, tf_config=True, cpu_replicas=1, env={})
