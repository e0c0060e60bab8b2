"""Kubernetes (PyTorchJob, JobSet) and SkyPilot, run as their pods and nodes run: one process per pod or node on
localhost, each with the environment the engine gives it for the manifest in docs/engines/ (read from the page,
so the docs show what runs), all running the Slurm page's unchanged train.py. Parameters equal one replica's."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import yaml

from tests.engine_tier import doc_blocks, job_env
from tests.harness import job_port

pytestmark = [pytest.mark.replicas, pytest.mark.timeout(300)]

TRAIN = doc_blocks("slurm.md", "python")[0]
POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}  # what the kubelet adds


def _free_port() -> str:
    return str(job_port())


def _run_pods(tmp_path, envs: list[dict]) -> dict:
    procs = []
    for i, env in enumerate(envs):
        d = tmp_path / f"pod{i}"
        d.mkdir()
        (d / "train.py").write_text(TRAIN)
        procs.append(subprocess.Popen([sys.executable, "train.py"], cwd=d, env=job_env(**env), text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    for proc in procs:
        try:
            outs.append(proc.communicate(timeout=200)[0])
        finally:
            if proc.poll() is None:
                proc.kill()
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, "\n---\n".join(o[-2500:] for o in outs)
        if len(envs) > 1:  # each process joined the job, not a one-replica job of its own
            assert "found no GPU" not in out, out[-2000:]
    # one job: only its chief saved (separate one-replica jobs would each save, and equal one replica too)
    assert [(tmp_path / f"pod{i}" / "model.pt").exists() for i in range(len(envs))] == [True] + [False] * (len(envs) - 1)
    return torch.load(tmp_path / "pod0" / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory):
    return _run_pods(tmp_path_factory.mktemp("one"), [{}])


def _assert_equal(got, want):
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-6)


def test_pytorchjob_pods(tmp_path, one_replica):
    job = yaml.safe_load(doc_blocks("kubernetes.md", "yaml")[0])
    specs = job["spec"]["pytorchReplicaSpecs"]
    pods = [("Master", 0)] + [("Worker", i) for i in range(specs["Worker"]["replicas"])]
    total, port = len(pods), _free_port()
    envs = []
    for kind, index in pods:
        assert specs[kind]["template"]["spec"]["containers"][0]["command"] == ["python", "train.py"]
        rank = index + (1 if kind == "Worker" else 0)  # the operator's rule (envvar.go): workers after the master
        # MASTER_ADDR is the master pod's service; here the master process listens on localhost
        envs.append({**POD, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(total),
                     "RANK": str(rank), "PET_NNODES": str(total), "PET_NODE_RANK": str(rank),
                     "PET_NPROC_PER_NODE": "auto", "PYTHONUNBUFFERED": "0"})
    _assert_equal(_run_pods(tmp_path, envs), one_replica)


def test_jobset_pods_with_pet_variables(tmp_path, one_replica):
    jobset = yaml.safe_load(doc_blocks("kubernetes.md", "yaml")[1])
    name, rjob = jobset["metadata"]["name"], jobset["spec"]["replicatedJobs"][0]
    job = rjob["template"]["spec"]
    container = job["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "train.py"] and job["completionMode"] == "Indexed"
    declared = {e["name"]: e for e in container["env"]}
    assert declared["PET_MASTER_ADDR"]["value"] == f"{name}-{rjob['name']}-0-0.{name}"  # pod 0 of job 0
    assert "job-completion-index" in declared["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    port = _free_port()
    envs = []
    for index in range(job["parallelism"]):
        env = {k: e["value"] for k, e in declared.items() if "value" in e}
        env.update(POD, PET_NODE_RANK=str(index), PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=port,
                   JOB_COMPLETION_INDEX=str(index))
        envs.append(env)
    assert envs[0]["PET_NNODES"] == str(job["parallelism"])
    _assert_equal(_run_pods(tmp_path, envs), one_replica)


def test_skypilot_nodes(tmp_path, one_replica):
    task = yaml.safe_load(doc_blocks("skypilot.md", "yaml")[0])
    assert task["run"].strip() == "python train.py"
    nodes = task["num_nodes"]
    ips = "\n".join(["127.0.0.1"] * nodes)
    port = _free_port()  # the task's envs: MASTER_PORT, as the page says, so parallel test runs do not collide
    envs = [{"SKYPILOT_NODE_RANK": str(r), "SKYPILOT_NODE_IPS": ips, "SKYPILOT_NUM_NODES": str(nodes),
             "SKYPILOT_NUM_GPUS_PER_NODE": "0", "SKYPILOT_TASK_ID": "sky-test", "MASTER_PORT": port}
            for r in range(nodes)]
    _assert_equal(_run_pods(tmp_path, envs), one_replica)
