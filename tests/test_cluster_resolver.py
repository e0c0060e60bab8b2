"""`MultiWorkerMirroredStrategy(TFConfigClusterResolver())`, the seeds' TensorFlow spelling, instead of an error."""

import json

import pytest
import torch

import allgpu
from allgpu.errors import ArgumentError, ClusterConfigError
from tests.harness import free_port, start_python, write_script

TWO = {"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "task": {"type": "worker", "index": 1}}


def test_the_resolver_reads_tf_config_and_overrides_the_task():
    resolver = allgpu.cluster_resolver.TFConfigClusterResolver(env={"TF_CONFIG": json.dumps(TWO)})
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.cluster_spec() == {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    assert resolver.tf_config.worker_index == 1 and resolver.tf_config.rendezvous == "10.0.0.1:2222"
    moved = allgpu.TFConfigClusterResolver(task_id=0, env={"TF_CONFIG": json.dumps(TWO)})
    assert moved.task_id == 0 and moved.tf_config.worker_index == 0
    assert resolver.num_accelerators() == {"GPU": 0}


def test_a_bad_tf_config_or_a_task_without_a_cluster_fails_when_the_resolver_is_built():
    with pytest.raises(ClusterConfigError, match="index"):
        allgpu.TFConfigClusterResolver(task_id=5, env={"TF_CONFIG": json.dumps(TWO)})
    with pytest.raises(ClusterConfigError, match="TF_CONFIG is not set"):
        allgpu.TFConfigClusterResolver(task_type="worker", task_id=0, env={})
    empty = allgpu.TFConfigClusterResolver(env={})
    assert empty.tf_config is None and empty.cluster_spec() == {} and empty.task_id is None


WORKER = """
import sys, torch, allgpu
resolver = allgpu.cluster_resolver.TFConfigClusterResolver(task_id=int(sys.argv[1]))  # overrides TF_CONFIG's index
strategy = allgpu.MultiWorkerMirroredStrategy(resolver, timeout=60)
total = strategy.reduce(allgpu.ReduceOp.SUM, torch.tensor([strategy.worker_index + 1.0]))
print("worker", strategy.worker_index, "of", strategy.num_replicas_in_sync, "sum", total.item(), flush=True)
"""


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_two_workers_take_their_places_from_the_resolver(tmp_path):
    # Both processes see a TF_CONFIG naming task 0; only the resolver's task_id tells them apart.
    tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{free_port()}", "127.0.0.1:1"]},
                            "task": {"type": "worker", "index": 0}})
    script = write_script(tmp_path, "worker.py", WORKER)
    procs = [start_python([str(script), str(i)], env={"TF_CONFIG": tf_config}) for i in range(2)]
    outs = [p.communicate(timeout=100)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for i, out in enumerate(outs):
        assert f"worker {i} of 2 sum 3.0" in out, out


def test_any_other_resolver_is_refused_naming_the_one_that_works():
    class SlurmClusterResolver:
        pass

    with pytest.raises(ArgumentError, match="SlurmClusterResolver.*TFConfigClusterResolver"):
        allgpu.MultiWorkerMirroredStrategy(SlurmClusterResolver())


@pytest.mark.replicas
@pytest.mark.timeout(60)
def test_a_rendezvous_port_in_use_is_named_not_a_backend_traceback():
    # Two batch jobs on one node with the same `export MASTER_PORT=...`: the second's replica 0 cannot listen.
    import socket

    from tests.harness import run_python

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        done = run_python(["-c", "import allgpu; allgpu.MultiWorkerMirroredStrategy()"], env=env, timeout=50)
    assert done.returncode != 0
    assert f"ClusterConfigError: replica 0 of 2 hosts the rendezvous but cannot listen on port {port}" in done.stderr
    assert "drop the MASTER_PORT export" in done.stderr


@pytest.mark.replicas
@pytest.mark.timeout(60)
def test_a_replica_count_the_engine_does_not_give_is_said(tmp_path):
    # MirroredStrategy(num_replicas=4) under `srun -n 2`: the job silently ran 2 replicas
    from tests.harness import run_python

    step = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
            "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_STEP_NODELIST": "localhost",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    code = "import allgpu; s = allgpu.MirroredStrategy(num_replicas=2); print('replicas', s.num_replicas_in_sync)"
    done = run_python(["-c", code], env=step, timeout=50)
    assert done.returncode == 0, done.stderr
    assert "replicas 1" in done.stdout
    assert "asks for 2 replicas here (devices/num_replicas), but Slurm started 1 process on this machine" in done.stderr
