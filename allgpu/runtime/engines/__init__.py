"""Cluster discovery: which engine started this process, read into one frozen :class:`Cluster`.

One module per engine (:mod:`.slurm`, :mod:`.ray`, :mod:`.kubernetes`, :mod:`.skypilot`), beside torchrun's and
``TF_CONFIG``'s readers in :mod:`allgpu.runtime.cluster`. :func:`discover` asks them in this order:

1. **a launcher's replica**: torchrun, ``allgpu run``, ``allgpu.launch`` or Ray Train (``RANK``, ``WORLD_SIZE``
   and ``LOCAL_RANK`` set; Ray Train named as such when ``ray.train.get_context()`` answers). A launcher run
   inside an engine (``srun allgpu run``, torchrun in a Trainer pod, Ray on Slurm nodes) refines that engine's
   description, so it wins without a comparison;
2. **a Kubeflow PyTorchJob pod** running the script itself (``RANK``, ``WORLD_SIZE``, no ``LOCAL_RANK``);
   then **an MPI rank** (:mod:`.mpi`: ``mpirun -np N python train.py``), which also wins without a comparison
   (``mpirun`` inside a Slurm allocation starts its daemons through ``srun``); then **a task of submitit's local
   executor** (:mod:`.submitit_local`), which wins alike (it may run inside a Slurm allocation's shell);
3. the engines that start one process per task or node, compared with each other: **Slurm** (a task of an
   ``srun`` step), **TF_CONFIG** (for multi-worker strategies), **Kubeflow Trainer v2 / JobSet** (``PET_*``),
   **SkyPilot** (``SKYPILOT_*``). The first present wins; two present that disagree on the number of processes
   or on this one's index is a :class:`~allgpu.errors.ClusterConfigError` naming both.

None of them: a single-machine job (launch-free start over this machine's devices).
"""

from __future__ import annotations

import hashlib
import os
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import TFConfig, from_tf_config_env, from_torchrun_env, split_host_port
from allgpu.runtime.engines import kubernetes, mpi, ray, skypilot, slurm, submitit_local
from allgpu.runtime.engines.description import Cluster

__all__ = ["Cluster", "discover", "from_tf_config"]


def from_tf_config(tf: TFConfig) -> Cluster:
    """A parsed ``TF_CONFIG`` as a :class:`Cluster`: one process per worker, worker 0 the rendezvous."""
    hosts = tuple(split_host_port(w, "TF_CONFIG cluster")[0] for w in tf.workers)
    cluster = hashlib.sha256(",".join(tf.workers).encode()).hexdigest()[:12]  # every worker lists the same
    return Cluster("TF_CONFIG", ("TF_CONFIG",), tf.num_workers, tf.worker_index, tf.rendezvous_host,
                   tf.rendezvous_port, hosts=hosts, job=f"TF_CONFIG cluster {cluster}")


def _exported_around_srun(env: Mapping[str, str]) -> bool:
    """``WORLD_SIZE`` set by no launcher in a task of an ``srun`` step, so Slurm describes the job (and
    ``WORLD_SIZE`` must agree with it). Two forms: a batch script's own ``export WORLD_SIZE=...`` (with
    ``MASTER_ADDR``/``MASTER_PORT``, no ``RANK``) before ``srun python train.py``, as HPC centres' DDP examples do;
    and the task's own ``os.environ["RANK"] = SLURM_PROCID``, ``WORLD_SIZE = SLURM_NTASKS`` (and ``LOCAL_RANK``)
    without ``MASTER_ADDR``/``MASTER_PORT``, as ``init_distributed_mode`` of MAE, ConvNeXt, DeiT and other research
    repos launched by submitit does (their rendezvous is a ``file://`` or ``tcp://`` URL, not the environment)."""
    if "WORLD_SIZE" not in env or "SLURM_STEP_ID" not in env or "SLURM_JOB_ID" not in env:
        return False
    if "RANK" not in env:
        return True
    own_rank = env["RANK"].strip() == env.get("SLURM_PROCID", "").strip()
    return own_rank and not ("MASTER_ADDR" in env and "MASTER_PORT" in env)


def _check_exported_world_size(env: Mapping[str, str], cluster: Cluster) -> None:
    raw = env["WORLD_SIZE"]
    if raw.strip().isdigit() and int(raw) == cluster.units:
        return
    raise ClusterConfigError(
        f"WORLD_SIZE={raw!r} is set (by the batch script?), but this srun step has {cluster.units} task"
        f"{'s' if cluster.units != 1 else ''} (SLURM_STEP_NUM_TASKS), and each task is one replica. Fix: make srun "
        f"start WORLD_SIZE tasks (srun -n {raw}, or --ntasks-per-node x --nodes), or drop the `export WORLD_SIZE` "
        "(allgpu reads the number of replicas from Slurm).")


def _check_rank_against_srun(env: Mapping[str, str]) -> None:
    """``RANK`` without a launcher's ``LOCAL_RANK`` in a task of an ``srun`` step must be the task's own rank: a batch
    script's ``export RANK=$SLURM_PROCID`` runs once, in the batch shell (always 0), so every task would claim rank 0
    (one fails with EADDRINUSE at the rendezvous, the other waits there for the timeout)."""
    if "RANK" not in env or "LOCAL_RANK" in env or "SLURM_STEP_ID" not in env or "SLURM_PROCID" not in env:
        return
    if env["RANK"].strip() == env["SLURM_PROCID"].strip():
        return
    raise ClusterConfigError(
        f"RANK={env['RANK']!r} is set, but this is task SLURM_PROCID={env['SLURM_PROCID']} of an srun step: the tasks "
        "would not have distinct ranks (an `export RANK=$SLURM_PROCID` in the batch script runs once, in the batch "
        "shell, where SLURM_PROCID is 0). Fix: drop the export (allgpu reads each task's rank from Slurm), or set it "
        "inside each task: srun bash -c 'RANK=$SLURM_PROCID python train.py'.")


def launcher(env: Mapping[str, str]) -> Cluster | None:
    """Step 1 and 2 of the order: a launcher's replica, or a PyTorchJob pod; None when neither."""
    _check_rank_against_srun(env)
    if _exported_around_srun(env):
        return None  # not a launcher's replica: Slurm's step describes it (checked against WORLD_SIZE in discover)
    pod = kubernetes.detect_pytorchjob(env)
    if pod is not None:
        return pod
    try:
        spec = from_torchrun_env(env)
    except ClusterConfigError as exc:
        hint = slurm.batch_shell_hint(env)  # Princeton-style exports, then `python train.py` without srun
        if not hint:
            raise
        raise ClusterConfigError(f"{exc}{hint}") from None
    if spec is None:
        return None
    from_ray = ray.detect(env)
    if from_ray is not None:
        return from_ray
    return Cluster(spec.source, ("RANK", "WORLD_SIZE"), spec.world_size, spec.rank, spec.master_addr,
                   spec.master_port, spec)


def discover(env: Mapping[str, str] | None = None, *, tf_config: bool = True) -> Cluster | None:
    """The job this process belongs to, in the order of the module docstring; None: a single-machine job.

    Args:
        env: the environment to read (default ``os.environ``).
        tf_config: consider ``TF_CONFIG`` (multi-worker strategies do; ``MirroredStrategy`` is one machine's, as
            in TensorFlow).

    Raises:
        ClusterConfigError: an engine's variables are malformed (naming them), or two engines disagree (naming
            both).
    """
    env = os.environ if env is None else env
    first = launcher(env) or mpi.detect(env) or submitit_local.detect(env)
    if first is not None:
        return first
    tf = from_tf_config_env(env) if tf_config else None
    found = [c for c in (slurm.detect(env), None if tf is None else from_tf_config(tf), kubernetes.detect_trainer(env),
                         skypilot.detect(env)) if c is not None]
    for other in found[1:]:
        if not found[0].agrees_with(other):
            a, b = found[0], other
            raise ClusterConfigError(
                f"two cluster engines describe this process differently: {a.engine} ({', '.join(a.variables)}) says "
                f"process {a.index} of {a.units}, {b.engine} ({', '.join(b.variables)}) says process {b.index} of "
                f"{b.units}. Fix: unset the variables of the engine that did not start this job (e.g. `unset "
                f"{b.variables[0]}`), or make them agree.")
    if found and _exported_around_srun(env):
        _check_exported_world_size(env, found[0])
    return found[0] if found else None
