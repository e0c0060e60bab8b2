"""Slurm: the tasks of the step's first node, looked at from another node while the rendezvous waits.

Task 0 hosts the job's store on the step's first node. When it fails before the store is up (alone on its node,
or with every task of that node: a bad node), no task of that node is left to see it (:mod:`.slurm_tasks` looks
at one node's tasks through ``scontrol listpids``, which answers "only with processes on the node on which
scontrol is run") and the store never comes: the other nodes' tasks waited until the timeout. So the first task of
every other node asks that node itself: ``srun --overlap --jobid JOB -w NODE -N1 -n1 scontrol listpids JOB.STEP``
runs ``scontrol`` there as a step sharing the job's resources (Slurm's ``srun --overlap``, 20.11 and later). Its
answer: the step's task ids still running there, or ``StepId=JOB.STEP does not exist on node``: none (the step's
``slurmstepd`` there has ended with its tasks). The first node's tasks are the first ``SLURM_STEP_TASKS_PER_NODE``
ones (``srun``'s default block distribution, which the rendezvous assumes already).

No false alarm: nothing is concluded when ``srun`` fails (an older Slurm, a site that forbids it, a timeout), and
an answer counts only when the next look, ``POLL_S`` later, gives the same. Looks begin after ``AFTER_S`` of
waiting (a step whose tasks all start in that time costs nothing) and stop once the store is up.

Once it is up, task 0 looks alike at each other node none of whose tasks has reached the store (a node whose tasks
all failed; a task that reaches it marks its node there), and posts what it finds in the store for every task.
"""

from __future__ import annotations

import subprocess
from typing import Mapping

from allgpu.runtime.engines.slurm import expand_hostlist, tasks_per_node

AFTER_S = 8.0  # seconds of waiting at the rendezvous before the first look
POLL_S = 4.0  # seconds between looks


def _step(env: Mapping[str, str]) -> str:
    return f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"


def watches_first_node(env: Mapping[str, str]) -> bool:
    """Whether this task looks at the first node: the first task (lowest of ``SLURM_GTIDS``) of a node other than
    the first, in a step of two nodes or more."""
    here = sorted(int(t) for t in env.get("SLURM_GTIDS", "").split(",") if t.strip().isdigit())
    nodes = env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", "1"))
    return (bool(here) and env.get("SLURM_NODEID", "0") not in ("", "0") and here[0] == int(env.get("SLURM_PROCID", -1))
            and nodes.isdigit() and int(nodes) > 1)


def nodes(env: Mapping[str, str]) -> list[tuple[str, list[int]]]:
    """The step's nodes in order, each with the task ids ``srun`` placed there; [] when the variables do not say
    (or do not agree: as many names as counts)."""
    try:
        hosts = expand_hostlist(env["SLURM_STEP_NODELIST"])
        counts = tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"])
    except Exception:  # a missing or malformed variable, no python-hostlist nor scontrol: nothing concluded
        return []
    if len(hosts) != len(counts):
        return []
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [(host, list(range(start, start + count))) for host, start, count in zip(hosts, starts, counts)]


def first_node(env: Mapping[str, str]) -> tuple[str, list[int]] | None:
    """The step's first node and the task ids ``srun`` placed there; None when the variables do not say."""
    listed = nodes(env)
    return listed[0] if listed else None


def running_on(env: Mapping[str, str], node: str, timeout_s: float = 30.0) -> set[int] | None:
    """The global ids of this step's tasks running on ``node``, asked there through ``srun --overlap``; None when
    the question could not be asked."""
    cmd = ["srun", "--overlap", f"--jobid={env.get('SLURM_JOB_ID', '')}", "-w", node, "-N1", "-n1", "--quiet",
           "scontrol", "listpids", _step(env)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=dict(env))
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout + out.stderr
    if f"StepId={_step(env)} does not exist on node" in text:
        return set()
    lines = out.stdout.splitlines()
    if out.returncode != 0 or not lines or not lines[0].split()[:1] == ["PID"]:
        return None
    return {int(f[4]) for f in (line.split() for line in lines[1:]) if len(f) >= 5 and f[4].isdigit()}


def ended_on_first_node(env: Mapping[str, str]) -> tuple[str, list[int]] | None:
    """``(node, tasks)``: the first node's tasks not running there now; None when all run or it cannot be said."""
    first = first_node(env)
    return None if first is None else ended_on(env, *first)


def ended_on(env: Mapping[str, str], node: str, tasks: list[int]) -> tuple[str, list[int]] | None:
    """``(node, ended)``: those of ``tasks`` (placed on ``node``) not running there now; None when all run or it
    cannot be said."""
    running = running_on(env, node)
    if running is None:
        return None
    ended = sorted(set(tasks) - running)
    return (node, ended) if ended else None
