"""submitit's local executor: ``AutoExecutor(folder, cluster="local")`` / ``LocalExecutor`` with
``tasks_per_node=N`` runs the submitted function in N processes on this machine, one replica each.

What it sets (submitit's ``submitit/local/local.py``, ``LocalJobEnvironment``): ``SUBMITIT_EXECUTOR=local``,
``SUBMITIT_LOCAL_NTASKS`` (N), ``SUBMITIT_LOCAL_GLOBALID`` / ``SUBMITIT_LOCAL_LOCALID`` (the task's index, alike on
its one node), ``SUBMITIT_LOCAL_JOB_ID`` (the controller's process id), ``SUBMITIT_LOCAL_JOB_NUM_NODES`` (1); no
``RANK`` or ``MASTER_ADDR``. Without this reader each of the N tasks took itself for a job of its own (N separate
trainings of one replica each). The tasks meet on this machine on a port derived from the job id, so none has to
tell another; ``MASTER_PORT`` wins. Under submitit's Slurm executor the tasks are ``srun``'s (:mod:`.slurm`).
"""

from __future__ import annotations

import os
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines.description import Cluster

VARIABLES = ("SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_NTASKS")
# Ports 15000..30999, as Slurm's derived ones (below Linux's ephemeral range).
PORT_BASE, PORT_SPAN = 15000, 16000


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        raise ClusterConfigError(f"{key}={env.get(key)!r}: submitit's local executor sets it to an integer. Fix: "
                                 "submit through submitit (do not set SUBMITIT_LOCAL_* by hand).") from None


def detect(env: Mapping[str, str] | None = None) -> Cluster | None:
    """This task's place in a job of submitit's local executor; None outside one (``SUBMITIT_EXECUTOR`` not
    ``local``, or no task id: the controller itself).

    Raises:
        ClusterConfigError: a variable missing or malformed, naming it.
    """
    env = os.environ if env is None else env
    if env.get("SUBMITIT_EXECUTOR") != "local" or "SUBMITIT_LOCAL_GLOBALID" not in env:
        return None
    rank, world = _int(env, "SUBMITIT_LOCAL_GLOBALID"), _int(env, "SUBMITIT_LOCAL_NTASKS")
    local = _int(env, "SUBMITIT_LOCAL_LOCALID") if "SUBMITIT_LOCAL_LOCALID" in env else rank
    job = _int(env, "SUBMITIT_LOCAL_JOB_ID")
    port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT", "").isdigit() else PORT_BASE + job % PORT_SPAN
    addr = env.get("MASTER_ADDR") or "127.0.0.1"
    if not 0 <= rank < world:
        raise ClusterConfigError(f"SUBMITIT_LOCAL_GLOBALID={rank} with SUBMITIT_LOCAL_NTASKS={world}: expected "
                                 "0 <= id < tasks. Fix: submit through submitit.")
    spec = ClusterSpec(rank, world, local, world, addr, port, "submitit (local)", f"submitit local job {job}")
    return Cluster("submitit (local)", VARIABLES, world, rank, addr, port, spec, ("127.0.0.1",))
