"""Cluster discovery for each engine (allgpu.runtime.engines), from the environments each engine documents."""

from __future__ import annotations

import dataclasses
import json

import pytest

from allgpu.runtime.cluster_resolver import (KubernetesClusterResolver, RayClusterResolver, SkyPilotClusterResolver,
                                             SlurmClusterResolver, TFConfigClusterResolver)
from allgpu.errors import ArgumentError, ClusterConfigError
from allgpu.runtime.engines import discover, slurm


def srun_env(procid: int, ntasks: int = 8, localid: int = 0, nodeid: int = 0, **extra) -> dict:
    """The variables `srun -N 2 --ntasks-per-node 4` gives a task (as read from a real srun, minus the rest)."""
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(localid),
            "SLURM_NODEID": str(nodeid), "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_NTASKS": str(ntasks),
            "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_NODELIST": "gpu[07-08]",
            "SLURM_STEP_TASKS_PER_NODE": "4(x2)", **extra}


def tf_config(index: int, workers=("a:2222", "b:2222")) -> str:
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


def test_srun_task_is_one_replica_and_every_task_derives_the_same_rendezvous():
    cluster = discover(srun_env(procid=6, localid=2, nodeid=1))
    assert cluster.engine == "Slurm" and cluster.per_replica
    spec = cluster.process
    assert (spec.rank, spec.world_size, spec.local_rank, spec.local_world_size) == (6, 8, 2, 4)
    assert cluster.hosts == ("gpu07", "gpu08") and spec.master_addr == "gpu07"
    ports = {discover(srun_env(procid=p, localid=p % 4, nodeid=p // 4)).master_port for p in range(8)}
    assert ports == {slurm.rendezvous_port(4242, 0)} and 15000 <= ports.pop() < 31000
    assert slurm.rendezvous_port(4242, 1) != slurm.rendezvous_port(4242, 0)  # two steps at once in one job


def test_srun_uneven_tasks_per_node_and_master_override():
    env = srun_env(procid=4, ntasks=5, localid=0, nodeid=1, SLURM_STEP_TASKS_PER_NODE="4,1",
                   MASTER_ADDR="10.0.0.5", MASTER_PORT="29555")
    spec = discover(env).process
    assert (spec.local_world_size, spec.master_addr, spec.master_port) == (1, "10.0.0.5", 29555)


def test_a_batch_script_without_srun_is_not_a_slurm_step():
    batch = {"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "vm"}
    assert discover(batch) is None


def test_world_size_exported_around_srun_is_read_as_slurm_and_checked():
    # HPC centres' DDP batch scripts: export WORLD_SIZE, MASTER_ADDR, MASTER_PORT; then srun python train.py
    exported = {"WORLD_SIZE": "8", "MASTER_ADDR": "gpu07", "MASTER_PORT": "29500"}
    spec = discover(srun_env(procid=5, localid=1, nodeid=1, **exported)).process
    assert (spec.rank, spec.world_size, spec.master_port) == (5, 8, 29500)
    with pytest.raises(ClusterConfigError, match=r"WORLD_SIZE='16'.*8 tasks.*srun -n 16"):
        discover(srun_env(procid=5, localid=1, nodeid=1, **{**exported, "WORLD_SIZE": "16"}))
    # `export RANK=$SLURM_PROCID` in the batch shell gives every task RANK=0: named, not two rank-0 replicas
    with pytest.raises(ClusterConfigError, match=r"RANK='0'.*SLURM_PROCID=5.*batch shell"):
        discover(srun_env(procid=5, localid=1, nodeid=1, RANK="0", **exported))
    assert discover(srun_env(procid=5, localid=1, nodeid=1, RANK="5", **exported)).process.rank == 5


def test_rank_set_from_slurm_by_the_task_without_master_is_read_as_slurm():
    # MAE / ConvNeXt init_distributed_mode under submitit: RANK=SLURM_PROCID, WORLD_SIZE=SLURM_NTASKS, LOCAL_RANK,
    # no MASTER_ADDR/PORT (their rendezvous was a file:// URL); was "start the script with torchrun"
    own = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}
    cluster = discover(srun_env(procid=5, localid=1, nodeid=1, **own))
    assert cluster.engine == "Slurm" and cluster.process.master_addr == "gpu07"
    assert cluster.master_port == slurm.rendezvous_port(4242, 0)
    with pytest.raises(ClusterConfigError, match=r"WORLD_SIZE='16'.*8 tasks"):
        discover(srun_env(procid=5, localid=1, nodeid=1, **{**own, "WORLD_SIZE": "16"}))


def test_submitit_local_executor_tasks_form_one_job():
    def task(i: int) -> dict:  # what submitit's LocalExecutor controller gives task i of tasks_per_node=2
        return {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_GLOBALID": str(i),
                "SUBMITIT_LOCAL_LOCALID": str(i), "SUBMITIT_LOCAL_JOB_ID": "31337", "SUBMITIT_LOCAL_NODEID": "0"}

    found = [discover(task(i)) for i in range(2)]
    assert [(c.process.rank, c.process.world_size, c.process.local_rank) for c in found] == [(0, 2, 0), (1, 2, 1)]
    assert found[0].master_port == found[1].master_port and found[0].master_addr == "127.0.0.1"
    assert discover({"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_NTASKS": "2"}) is None  # the controller
    with pytest.raises(ClusterConfigError, match="SUBMITIT_LOCAL_JOB_ID"):
        discover({**task(0), "SUBMITIT_LOCAL_JOB_ID": "x"})


def test_malformed_slurm_variable_is_named():
    with pytest.raises(ClusterConfigError, match="SLURM_PROCID='x'"):
        discover(srun_env(procid=0) | {"SLURM_PROCID": "x"})
    with pytest.raises(ClusterConfigError, match="SLURM_STEP_TASKS_PER_NODE='4x2'"):
        discover(srun_env(procid=0) | {"SLURM_STEP_TASKS_PER_NODE": "4x2"})
    with pytest.raises(ClusterConfigError, match="SLURM_STEP_NODELIST"):
        discover({k: v for k, v in srun_env(procid=0).items() if k != "SLURM_STEP_NODELIST"})


def test_two_engines_that_disagree_name_both():
    env = srun_env(procid=1, ntasks=2, localid=1) | {"SLURM_STEP_TASKS_PER_NODE": "2", "TF_CONFIG": tf_config(0)}
    with pytest.raises(ClusterConfigError) as err:
        discover(env)
    assert "Slurm" in str(err.value) and "TF_CONFIG" in str(err.value) and "process 1 of 2" in str(err.value)
    # agreeing descriptions: the first in the documented order wins
    agree = env | {"TF_CONFIG": tf_config(1)}
    assert discover(agree).engine == "Slurm"
    # MirroredStrategy (tf_config=False) does not read TF_CONFIG at all
    assert discover(env, tf_config=False).engine == "Slurm"
    sky = {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NUM_NODES": "2"}
    with pytest.raises(ClusterConfigError, match="SkyPilot"):
        discover(srun_env(procid=3, ntasks=4) | sky)


def test_a_launcher_inside_an_engine_wins_without_comparison():
    # `srun allgpu run ...`: each replica of the per-node launcher carries torchrun's variables and the task's.
    env = srun_env(procid=1, ntasks=2) | {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
                                         "MASTER_ADDR": "gpu07", "MASTER_PORT": "29400"}
    cluster = discover(env)
    assert cluster.engine == "torchrun" and (cluster.process.rank, cluster.process.world_size) == (5, 16)


def test_legacy_pytorchjob_pod_derives_its_local_rank():
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
           "WORLD_SIZE": "3", "RANK": "2", "PYTHONUNBUFFERED": "0"}
    cluster = discover(pod)
    spec = cluster.process
    assert cluster.engine == "PyTorchJob" and (spec.rank, spec.world_size, spec.local_rank, spec.local_world_size) \
        == (2, 3, 0, 1)
    # training-operator >= 1.7 with nprocPerNode 4: WORLD_SIZE counts processes, RANK is the pod's index
    wide = pod | {"WORLD_SIZE": "12", "PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "4"}
    first = discover(wide).first_replica(4)
    assert (first.rank, first.world_size, first.master_addr) == (8, 12, "job-master-0")
    # RANK/WORLD_SIZE by hand outside a pod: torchrun's reading, unchanged
    assert discover({k: v for k, v in pod.items() if k != "KUBERNETES_SERVICE_HOST"}).engine == "torchrun"


def test_trainer_v2_and_jobset_pet_variables():
    pet = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "train-node-0-0.t",
           "PET_MASTER_PORT": "29400"}
    cluster = discover(pet)
    assert cluster.engine == "Kubeflow Trainer" and not cluster.per_replica
    first = cluster.first_replica(2)
    assert (first.rank, first.world_size, first.master_addr, first.master_port) == (2, 4, "train-node-0-0.t", 29400)
    with pytest.raises(ClusterConfigError, match="PET_MASTER_ADDR"):
        discover({k: v for k, v in pet.items() if k != "PET_MASTER_ADDR"})
    with pytest.raises(ClusterConfigError, match="PET_NNODES='1:4'"):
        discover(pet | {"PET_NNODES": "1:4"})


def test_skypilot_node():
    sky = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2\n", "SKYPILOT_NUM_NODES": "2",
           "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
    first = discover(sky).first_replica(8)
    assert (first.rank, first.world_size, first.master_addr, first.master_port) == (8, 16, "10.0.0.1", 29500)
    with pytest.raises(ClusterConfigError, match="lists 2 addresses"):
        discover(sky | {"SKYPILOT_NUM_NODES": "3"})


def test_resolvers_with_tensorflow_names():
    r = SlurmClusterResolver(env=srun_env(procid=5, localid=1, nodeid=1))
    assert r.task_type == "worker" and r.task_id == 5 and r.cluster().engine == "Slurm"
    assert r.cluster_spec()["worker"][4].startswith("gpu08:") and len(r.cluster_spec()["worker"]) == 8
    assert r.master(rpc_layer="grpc").startswith("grpc://gpu07:")
    with pytest.raises(ClusterConfigError, match="srun"):
        SlurmClusterResolver(env={})
    with pytest.raises(ArgumentError, match="jobs"):
        SlurmClusterResolver(jobs={"ps": 1, "worker": 3}, env=srun_env(procid=0))
    pod = {"KUBERNETES_SERVICE_HOST": "x", "MASTER_ADDR": "m", "MASTER_PORT": "1", "WORLD_SIZE": "2", "RANK": "1"}
    assert KubernetesClusterResolver(env=pod).task_id == 1
    sky = {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "10.0.0.1", "SKYPILOT_NUM_NODES": "1"}
    assert SkyPilotClusterResolver(env=sky).master() == "10.0.0.1:29500"
    with pytest.raises(ClusterConfigError, match="Ray Train"):
        RayClusterResolver()
    assert TFConfigClusterResolver(env={"TF_CONFIG": tf_config(1)}).cluster().index == 1


def test_multi_worker_refuses_another_resolver_kind():
    import allgpu

    with pytest.raises(ArgumentError, match="SlurmClusterResolver"):
        allgpu.MultiWorkerMirroredStrategy(object())


def ompi_env(rank: int, size: int = 4, local_size: int = 4, **extra) -> dict:
    """What Open MPI 4.1's mpirun gives a rank (as read from a real `mpirun -np 2`, minus the rest)."""
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_size), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
            "OMPI_MCA_ess_base_jobid": "1134493697", **extra}


def test_an_mpirun_rank_is_one_replica_and_every_rank_derives_the_same_rendezvous():
    clusters = [discover(ompi_env(r)) for r in range(4)]
    assert {c.engine for c in clusters} == {"mpirun (Open MPI)"} and all(c.per_replica for c in clusters)
    spec = clusters[3].process
    assert (spec.rank, spec.world_size, spec.local_rank, spec.local_world_size) == (3, 4, 3, 4)
    assert {(c.master_addr, c.master_port) for c in clusters} == {("127.0.0.1", 15000 + 1134493697 % 16000)}
    hydra = discover({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert hydra.engine == "mpirun (MPICH/Intel MPI)" and (hydra.process.rank, hydra.master_port) == (1, 29500)


def test_mpirun_over_machines_needs_master_addr_and_says_so():
    with pytest.raises(ClusterConfigError, match="MASTER_ADDR") as error:
        discover(ompi_env(5, size=8, local_size=4))
    assert "-x MASTER_ADDR" in str(error.value)
    spec = discover(ompi_env(5, size=8, local_size=4, MASTER_ADDR="node1", MASTER_PORT="29400")).process
    assert (spec.rank, spec.local_rank, spec.master_addr, spec.master_port) == (5, 1, "node1", 29400)


def test_mpirun_inside_a_slurm_allocation_is_read_as_mpi_ranks():
    # mpirun in an sbatch script starts one daemon per node through srun: the ranks inherit that step's variables
    env = {**srun_env(procid=0, ntasks=1), **ompi_env(2, size=4, local_size=4)}
    cluster = discover(env)
    assert cluster.engine == "mpirun (Open MPI)" and cluster.process.rank == 2


def test_malformed_mpi_variable_is_named():
    with pytest.raises(ClusterConfigError, match="OMPI_COMM_WORLD_RANK='x'"):
        discover(ompi_env(0, OMPI_COMM_WORLD_RANK="x"))


def test_a_slurm_task_waiting_at_the_rendezvous_says_a_failed_task_never_comes(monkeypatch, capsys):
    # srun keeps the other tasks running when one exits before the rendezvous: task 0 would wait the whole timeout
    import time

    from allgpu.runtime.cluster import ClusterSpec
    from allgpu.runtime.waiting import reporting_wait

    monkeypatch.setenv("ALLGPU_WAIT_REPORT_S", "0.05")
    for source, hinted in (("Slurm", True), ("torchrun", False)):
        with reporting_wait(ClusterSpec(0, 2, 0, 2, "vm", 15001, source), 1800):
            time.sleep(0.3)
        err = capsys.readouterr().err
        assert "replica 0 of 2 has waited" in err
        assert ("srun --kill-on-bad-exit=1" in err) is hinted, err


def test_a_batch_script_shell_with_several_tasks_is_told_to_use_srun(monkeypatch):
    # `python train.py` in an sbatch script with --ntasks=2 (no srun): one process, which must say why
    import warnings

    import allgpu

    batch = {"SLURM_JOB_ID": "20", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "vm"}
    with pytest.raises(ClusterConfigError, match=r"RANK missing.*batch script of Slurm job 20.*srun python train.py"):
        discover({**batch, "WORLD_SIZE": "2", "MASTER_ADDR": "vm", "MASTER_PORT": "29500"})
    import torch

    if torch.cuda.is_available():
        return  # with a GPU the strategy would start its replicas on it, with no warning to check
    for key, value in batch.items():
        monkeypatch.setenv(key, value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = allgpu.MirroredStrategy()
    strategy.close()
    assert any("(2 tasks allocated), not a task of an srun step" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]


def test_allgpu_run_as_one_of_several_srun_tasks_with_one_node_is_refused(tmp_path):
    # `srun -n 2 allgpu run train.py` ran two separate one-replica jobs, each believing it was the whole job
    from allgpu.runtime import elastic

    script = tmp_path / "train.py"
    script.write_text("")
    step = srun_env(procid=1, ntasks=2, localid=1, SLURM_STEP_TASKS_PER_NODE="2")
    with pytest.raises(ClusterConfigError, match=r"task 1 of an srun step of 2 tasks.*2 separate trainings.*srun "
                                                 r"python train.py"):
        elastic.plan(str(script), cpu_replicas=1, env=step)
    one_task = srun_env(procid=0, ntasks=1, SLURM_STEP_TASKS_PER_NODE="1")
    assert elastic.plan(str(script), cpu_replicas=2, env=one_task).max_nodes == 1  # srun -n 1 allgpu run: fine
    launchers = elastic.plan(str(script), cpu_replicas=2, nnodes="2", rdzv_endpoint="gpu07:29400", env=step)
    assert launchers.max_nodes == 2  # the documented one launcher per node


def test_launch_inside_several_srun_tasks_is_refused_before_starting_anything(monkeypatch):
    # `srun -n 2 python nb.py` around allgpu.launch(fn, num_replicas=2) ran two separate 2-replica jobs
    import allgpu
    from allgpu.errors import StrategyStartError

    for key, value in srun_env(procid=1, ntasks=2, localid=1, SLURM_STEP_TASKS_PER_NODE="2").items():
        monkeypatch.setenv(key, value)
    with pytest.raises(StrategyStartError, match=r"process 1 of the 2 that Slurm started.*call the function directly"):
        allgpu.launch(print, num_replicas=2)


def test_each_engine_names_its_job_alike_on_every_process_for_the_rendezvous_check():
    # allgpu.runtime.job_identity compares these: the same on every process of one job, different between jobs
    def job(env, local=1):
        cluster = discover(env, tf_config=True)
        return (cluster.process or cluster.first_replica(local)).job

    assert job({"TF_CONFIG": tf_config(0)}) == job({"TF_CONFIG": tf_config(1)}) != \
        job({"TF_CONFIG": tf_config(1, ("a:2222", "c:2222"))})
    assert job({"TF_CONFIG": tf_config(0)}).startswith("TF_CONFIG cluster ")
    assert job(srun_env(procid=0)) == job(srun_env(procid=5, localid=1, nodeid=1)) == "Slurm job 4242 step 0"
    sky = {"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "0",
           "SKYPILOT_TASK_ID": "sky-2026-11-25-task"}
    assert job({**sky, "SKYPILOT_NODE_RANK": "0"}) == job({**sky, "SKYPILOT_NODE_RANK": "1"}) == \
        "SkyPilot task sky-2026-11-25-task"


def test_a_slurm_step_with_fewer_tasks_than_gpus_names_the_idle_ones():
    # srun -n 1 (submitit tasks_per_node=1) on a node of 8 GPUs: one replica on cuda:0, 7 GPUs idle without a word
    from allgpu.runtime.placement import idle_gpus

    one = discover(srun_env(procid=0, ntasks=1, SLURM_STEP_TASKS_PER_NODE="1", SLURM_STEP_NODELIST="gpu07")).process
    assert "7 stay idle" in idle_gpus(one, 8) and "tasks_per_node=8" in idle_gpus(one, 8)
    four = discover(srun_env(procid=1, localid=1)).process  # 4 tasks a node, each seeing the node's 4 GPUs
    assert idle_gpus(four, 4) == "" and idle_gpus(four, 1) == ""  # --gpus-per-node=4, --gpus-per-task=1
    assert idle_gpus(dataclasses.replace(one, source="torchrun"), 8) == ""  # a launcher's count is the user's
