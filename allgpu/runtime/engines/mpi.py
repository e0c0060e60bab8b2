"""MPI launchers: a process ``mpirun -np 8 python train.py`` started is one replica (as an ``srun`` task is).

What each launcher gives its processes (no ``RANK``, ``WORLD_SIZE`` or ``MASTER_ADDR``):

- **Open MPI** (``mpirun``/``mpiexec``, Open MPI's "mpirun(1)" manual, "Environment Variables"):
  ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_LOCAL_RANK``,
  ``OMPI_COMM_WORLD_LOCAL_SIZE``, and the job's id in ``OMPI_MCA_ess_base_jobid`` (read from a real Open MPI 4.1);
- **MPICH / Intel MPI** (the Hydra process manager): ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``,
  ``MPI_LOCALNRANKS``;
- **MVAPICH2**: ``MV2_COMM_WORLD_RANK``, ``MV2_COMM_WORLD_SIZE``, ``MV2_COMM_WORLD_LOCAL_RANK``,
  ``MV2_COMM_WORLD_LOCAL_SIZE``.

Rendezvous: MPI does not say which host rank 0 runs on. When every rank is on this machine (local size = size)
it is 127.0.0.1; across machines ``MASTER_ADDR`` must be passed (``mpirun -x MASTER_ADDR=host0``), else a
:class:`~allgpu.errors.ClusterConfigError` says so. The port is ``MASTER_PORT`` when set, else derived from Open
MPI's job id (every rank computes the same one, two jobs at once get different ones), else torchrun's 29500.
A process started by ``mpirun`` is described by MPI even inside a Slurm allocation (``mpirun`` in an ``sbatch``
script starts its daemons through ``srun``, whose variables then describe the daemons, not the ranks).
"""

from __future__ import annotations

import os
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines.description import Cluster
from allgpu.runtime.engines.slurm import PORT_BASE, PORT_SPAN

# (launcher, rank, size, local rank, local size): the first whose rank and size are both set describes the process
LAUNCHERS = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MVAPICH2", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE"),
    ("MPICH/Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)
DEFAULT_PORT = 29500  # torchrun's


def _int(env: Mapping[str, str], key: str, launcher: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise ClusterConfigError(f"{key}={env[key]!r} is not an integer; {launcher}'s mpirun sets it. Fix: start "
                                 "the processes with mpirun, and do not set its variables by hand.") from None


def _port(env: Mapping[str, str]) -> int:
    if env.get("MASTER_PORT", "").isdigit():
        return int(env["MASTER_PORT"])
    job = env.get("OMPI_MCA_ess_base_jobid", "")
    return PORT_BASE + int(job) % PORT_SPAN if job.isdigit() else DEFAULT_PORT


def detect(env: Mapping[str, str] | None = None) -> Cluster | None:
    """This process's place among the ranks an MPI launcher started; None when no launcher's variables are set.

    Raises:
        ClusterConfigError: a variable malformed (naming it), or ranks on several machines without ``MASTER_ADDR``.
    """
    env = os.environ if env is None else env
    for launcher, rank_key, size_key, local_key, local_size_key in LAUNCHERS:
        if rank_key in env and size_key in env:
            break
    else:
        return None
    rank, world = _int(env, rank_key, launcher), _int(env, size_key, launcher)
    local = _int(env, local_key, launcher) if local_key in env else rank
    local_world = _int(env, local_size_key, launcher) if local_size_key in env else world
    addr = env.get("MASTER_ADDR")
    if not addr:
        if local_world < world:
            raise ClusterConfigError(
                f"{launcher}'s mpirun started {world} processes on several machines ({local_world} on this one), and "
                f"MPI does not say which machine rank 0 runs on. Fix: pass it, e.g. `mpirun -x MASTER_ADDR=<rank 0's "
                f"host> -x MASTER_PORT=29500 ...` (Open MPI) or `-genv MASTER_ADDR <host>` (MPICH, Intel MPI).")
        addr = "127.0.0.1"
    port = _port(env)
    job = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE")
    spec = ClusterSpec(rank, world, local, local_world, addr, port, "mpirun", f"{launcher} job {job}" if job else None)
    return Cluster(f"mpirun ({launcher})", (rank_key, size_key), world, rank, addr, port, spec)
