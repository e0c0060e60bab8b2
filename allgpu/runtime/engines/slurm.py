"""Slurm: a task of an ``srun`` job step is one replica (``srun -n 8 python train.py`` makes 8).

What ``srun`` gives each task (Slurm's ``srun`` manual, "OUTPUT ENVIRONMENT VARIABLES"): ``SLURM_PROCID`` (the
task's global rank), ``SLURM_LOCALID`` (its index on its node), ``SLURM_NODEID``, ``SLURM_STEP_NUM_TASKS``,
``SLURM_STEP_TASKS_PER_NODE`` (compressed: ``"4(x2),3"``), ``SLURM_STEP_NODELIST`` (compressed host list:
``"gpu[01-04]"``), ``SLURM_JOB_ID``, ``SLURM_STEP_ID``; no ``RANK``, ``WORLD_SIZE`` or ``MASTER_ADDR``. A batch
script itself (``sbatch``, no ``srun``) has ``SLURM_PROCID`` but no step variables: it is not a task of a step,
and a plain ``python train.py`` there is a one-process job.

Rendezvous: task 0 runs on the step's first node (``srun``'s default block distribution), whose name comes
from the host list expanded by python-hostlist (the parser of the host list format Slurm documents), or by
``scontrol show hostnames`` where python-hostlist is not installed. The port is derived from the job and step
id, so every task computes the same one without talking; ``MASTER_ADDR`` / ``MASTER_PORT`` set in the batch
script win over both.
"""

from __future__ import annotations

import os
import subprocess
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines.description import Cluster

STEP_VARIABLES = ("SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID")
# Ports 15000..30999: below Linux's ephemeral range (32768+), so no client socket holds the one a job derives.
PORT_BASE, PORT_SPAN = 15000, 16000


def rendezvous_port(job_id: int, step_id: int) -> int:
    """The port every task of step ``step_id`` of job ``job_id`` derives alike: ``15000..30999``; steps of one
    job running at once get different ports (16 apart in the job's block)."""
    return PORT_BASE + (job_id * 16 + step_id % 16) % PORT_SPAN


def expand_hostlist(text: str) -> list[str]:
    """``"gpu[01-02],cpu7"`` -> ``["gpu01", "gpu02", "cpu7"]`` (python-hostlist, else ``scontrol show hostnames``).

    Raises:
        ClusterConfigError: neither is available, or the list does not parse.
    """
    try:
        import hostlist
    except ImportError:
        hostlist = None
    if hostlist is not None:
        try:
            return list(hostlist.expand_hostlist(text))
        except hostlist.BadHostlist as exc:
            raise ClusterConfigError(f"the Slurm host list {text!r} does not parse ({exc}).") from None
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterConfigError(f"cannot expand the Slurm host list {text!r}: python-hostlist is not installed "
                                 f"and `scontrol show hostnames` failed ({exc}). Fix: pip install python-hostlist."
                                 ) from None
    if out.returncode != 0:
        raise ClusterConfigError(f"`scontrol show hostnames {text}` failed: {out.stderr.strip()}")
    return out.stdout.split()


def tasks_per_node(text: str) -> list[int]:
    """``"4(x2),3"`` -> ``[4, 4, 3]``: Slurm's compressed count of tasks on each node (python-hostlist's
    ``parse_slurm_tasks_per_node``).

    Raises:
        ClusterConfigError: the text is not in that form.
    """
    import hostlist

    try:
        return list(hostlist.parse_slurm_tasks_per_node(text))
    except Exception:  # python-hostlist raises ValueError or its BadHostlist on a malformed count
        raise ClusterConfigError(f"SLURM_STEP_TASKS_PER_NODE={text!r} is not Slurm's '4(x2),3' form.") from None


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise ClusterConfigError(f"{key}={env[key]!r} is not an integer; srun sets it. Fix: start the tasks "
                                 "with srun, and do not set SLURM_* variables by hand.") from None


def detect(env: Mapping[str, str] | None = None) -> Cluster | None:
    """This task's place in its ``srun`` step; None outside a step (no ``SLURM_STEP_ID``).

    Raises:
        ClusterConfigError: a step variable missing or malformed, naming it.
    """
    env = os.environ if env is None else env
    if "SLURM_STEP_ID" not in env or "SLURM_JOB_ID" not in env:
        return None
    missing = [k for k in (*STEP_VARIABLES, "SLURM_LOCALID", "SLURM_STEP_NODELIST") if k not in env]
    if missing:
        raise ClusterConfigError(f"this Slurm step's environment lacks {', '.join(missing)}. Fix: start the "
                                 "script with srun (not a hand-made SLURM_* environment).")
    rank, world, local = _int(env, "SLURM_PROCID"), _int(env, "SLURM_STEP_NUM_TASKS"), _int(env, "SLURM_LOCALID")
    hosts = expand_hostlist(env["SLURM_STEP_NODELIST"])
    per_node = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", str(world)))
    node = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
    local_world = per_node[node] if node < len(per_node) else per_node[-1]
    port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT", "").isdigit() else \
        rendezvous_port(_int(env, "SLURM_JOB_ID"), _int(env, "SLURM_STEP_ID"))
    addr = env.get("MASTER_ADDR") or hosts[0]
    spec = ClusterSpec(rank, world, local, local_world, addr, port, "Slurm",
                       f"Slurm job {env['SLURM_JOB_ID']} step {env['SLURM_STEP_ID']}")
    return Cluster("Slurm", ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"), world, rank, addr, port, spec, tuple(hosts))


def batch_shell_hint(env: Mapping[str, str] | None = None) -> str:
    """A sentence for messages about a process in a Slurm batch script's own shell (a job, no ``srun`` step), where
    several tasks were allocated but only ``srun`` starts them; "" anywhere else."""
    env = os.environ if env is None else env
    tasks = env.get("SLURM_NTASKS", "1")
    if "SLURM_JOB_ID" not in env or "SLURM_STEP_ID" in env or tasks.strip() in ("", "1"):
        return ""
    return (f" This process is the batch script of Slurm job {env['SLURM_JOB_ID']} ({tasks} tasks allocated), not "
            "a task of an srun step: start it with `srun python train.py` (one replica per task).")


def check_launcher_per_task(env: Mapping[str, str], max_nodes: int) -> None:
    """Refuse ``srun -n N allgpu run train.py`` with ``--nnodes 1``: each of the N launchers would run its own
    job, N separate trainings each believing it is the whole job (torchrun alike).

    Raises:
        ClusterConfigError: this launcher is one of several tasks of an srun step and expects one node.
    """
    tasks = env.get("SLURM_STEP_NUM_TASKS", "1")
    if max_nodes != 1 or "SLURM_STEP_ID" not in env or not tasks.isdigit() or int(tasks) < 2:
        return
    raise ClusterConfigError(
        f"allgpu run is task {env.get('SLURM_PROCID', '?')} of an srun step of {tasks} tasks, with --nnodes 1: each "
        f"of the {tasks} launchers would start a job of its own ({tasks} separate trainings). Fix: `srun python "
        "train.py` (each task one replica, no launcher), or one launcher per node: `srun --ntasks-per-node=1 allgpu "
        "run --nnodes $SLURM_NNODES --rdzv-endpoint $head:29400 --rdzv-id $SLURM_JOB_ID train.py` "
        "(docs/engines/slurm.md).")
