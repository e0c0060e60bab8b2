"""Rendezvous: ``allgpu.launch`` holds its port from its choice until the replicas are done; a replica of another
job reaching a job's rendezvous address is refused before it joins (allgpu.runtime.job_identity)."""

import os
import socket

import pytest
import torch

import allgpu
from tests.harness import free_port, start_python, write_script

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _port_taken_then_reduce():
    port = int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        try:  # another program trying the port before any replica joined: before, it was free for it to take
            other.bind(("127.0.0.1", port))
            taken = False
        except OSError:
            taken = True
    strategy = allgpu.MirroredStrategy()
    total = strategy.reduce("sum", torch.tensor(float(strategy.replica_id_in_sync + 1)))
    return taken, float(total), port


@pytest.mark.timeout(120)
def test_launch_holds_its_rendezvous_port_from_the_start_and_frees_it_after():
    results = allgpu.launch(_port_taken_then_reduce, num_replicas=2, timeout=60)
    assert [r[:2] for r in results] == [(True, 3.0), (True, 3.0)]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as after:
        after.bind(("127.0.0.1", results[0][2]))  # released once launch() returned


def _srun_task(job: int, task: int, port: int) -> dict:
    """What srun gives task ``task`` of a 2-task step of job ``job`` (both jobs given one MASTER_PORT)."""
    return {"SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0", "SLURM_PROCID": str(task), "SLURM_LOCALID": str(task),
            "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_TASKS_PER_NODE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1"}


@pytest.mark.timeout(180)
def test_a_task_of_another_job_on_the_same_address_is_refused_and_the_job_goes_on(tmp_path):
    script = write_script(tmp_path, "train.py", """
        import torch, allgpu
        strategy = allgpu.MultiWorkerMirroredStrategy()
        print("sum", float(strategy.reduce("sum", torch.tensor(1.0 + strategy.replica_id_in_sync))))
    """)
    port = free_port()
    first = start_python([str(script)], env=_srun_task(101, 0, port))
    other = start_python([str(script)], env=_srun_task(202, 1, port))  # job 202's task 1, its task 0 elsewhere
    out_other, _ = other.communicate(timeout=120)
    second = start_python([str(script)], env=_srun_task(101, 1, port))
    outs = [p.communicate(timeout=120)[0] for p in (first, second)]
    assert other.returncode == 1, out_other[-3000:]
    assert ("ClusterConfigError: replica 1 (Slurm job 202 step 0, 2 replicas) found that the rendezvous at "
            f"127.0.0.1:{port} belongs to another job (Slurm job 101 step 0, 2 replicas)") in out_other, out_other
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    assert all("sum 3.0" in out for out in outs), outs
