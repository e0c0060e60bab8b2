"""The environment contract between a launcher and its replicas: the only module that reads or writes ``ALLGPU_*``.

A replica started by allgpu (launch-free re-execution, ``allgpu.launch``, ``allgpu run``) finds torchrun's
variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) plus
these, which carry what torchrun has no name for:

==========================  =========================================================================
``ALLGPU_DEVICES``          the job's device list on this machine, ``"cpu:0,cpu:1"``; local rank r uses entry r
``ALLGPU_DEVICE``           ``"cpu"``: run on the CPU even where GPUs are visible (``allgpu run --cpu-replicas``)
``ALLGPU_ERROR_DIR``        folder where a failing replica leaves its traceback for the supervisor
``ALLGPU_TIMEOUT``          the launcher's collective timeout in seconds, used when the strategy gives none
``ALLGPU_CLUSTER_SOURCE``   who described the job: ``"allgpu"``, ``"TF_CONFIG"`` (else torchrun)
``ALLGPU_FRESH_STORE``      ``"1"``: each restart attempt gets its own store (``allgpu run`` with node ranks)
``ALLGPU_WAIT_REPORT_S``    seconds between "still waiting at the rendezvous" reports (default 30; tests shorten it)
``ALLGPU_JOB_ID``           the job in words (``allgpu job 3f2a...``, ``TF_CONFIG cluster ...``), checked at its rendezvous
==========================  =========================================================================

Launchers build the variables with :func:`replica_variables` / :func:`worker_variables`; replicas read them once
with :func:`read` into a frozen :class:`LaunchEnv`. Nothing else in allgpu names them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from allgpu.runtime.threads import threads_per_replica

DEVICES = "ALLGPU_DEVICES"
DEVICE_KIND = "ALLGPU_DEVICE"
ERROR_DIR = "ALLGPU_ERROR_DIR"
TIMEOUT = "ALLGPU_TIMEOUT"
CLUSTER_SOURCE = "ALLGPU_CLUSTER_SOURCE"
FRESH_STORE = "ALLGPU_FRESH_STORE"
WAIT_REPORT_S = "ALLGPU_WAIT_REPORT_S"
JOB_ID = "ALLGPU_JOB_ID"
ALL = (DEVICES, DEVICE_KIND, ERROR_DIR, TIMEOUT, CLUSTER_SOURCE, FRESH_STORE, JOB_ID)

# Collective timeout in seconds when neither the strategy nor a launcher gives one (torch.distributed's default).
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class LaunchEnv:
    """What the launcher left for this process (all None/False for a plain ``python train.py``).

    Attributes:
        devices: the device names of this machine's replicas, in local-rank order.
        cpu_only: replicas must run on the CPU.
        error_dir: where this replica writes its traceback if it fails.
        timeout_s: the launcher's collective timeout, seconds.
        cluster_source: ``"allgpu"``, ``"TF_CONFIG"`` or None (torchrun or none).
        fresh_store: use a fresh rendezvous store per restart attempt.
        wait_report_s: seconds between reports while a rendezvous waits for peers, or None for the default.
        job_id: the job in words, as its launcher named it (``"allgpu job 3f2a..."``), or None.
    """

    devices: tuple[str, ...] | None = None
    cpu_only: bool = False
    error_dir: str | None = None
    timeout_s: float | None = None
    cluster_source: str | None = None
    fresh_store: bool = False
    wait_report_s: float | None = None
    job_id: str | None = None


def read(env: Mapping[str, str] | None = None) -> LaunchEnv:
    """Read the contract from ``env`` (default ``os.environ``). Malformed values read as absent."""
    env = os.environ if env is None else env
    devices = env.get(DEVICES)
    return LaunchEnv(
        devices=tuple(d for d in devices.split(",") if d) if devices else None,
        cpu_only=env.get(DEVICE_KIND) == "cpu",
        error_dir=env.get(ERROR_DIR) or None,
        timeout_s=_positive_float(env.get(TIMEOUT)),
        cluster_source=env.get(CLUSTER_SOURCE) or None,
        fresh_store=env.get(FRESH_STORE) == "1",
        wait_report_s=_positive_float(env.get(WAIT_REPORT_S)),
        job_id=env.get(JOB_ID) or None,
    )


def _positive_float(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value and value > 0 else None


def resolve_timeout(argument: float | None, launched: LaunchEnv | None = None) -> float:
    """The collective timeout a strategy uses: its own argument if given, else the launcher's, else 1800 s."""
    if argument is not None:
        return float(argument)
    launched = read() if launched is None else launched
    return launched.timeout_s or DEFAULT_TIMEOUT_S


def replica_variables(local_rank: int, devices: Sequence[str], port: int, error_dir: str, timeout_s: float | None,
                      *, rank_offset: int = 0, world_size: int | None = None,
                      master_addr: str = "127.0.0.1", launcher_store: bool = False,
                      job_id: str | None = None) -> dict[str, str]:
    """The variables that make a process local replica ``local_rank`` of a job over ``devices`` (names).

    On one machine the global rank is the local rank; a multi-worker job passes this worker's ``rank_offset``
    (first global rank), the job's ``world_size`` and worker 0's ``master_addr``. ``launcher_store``: the
    launcher itself hosts the rendezvous store at ``master_addr:port`` (``allgpu.launch``), so every replica,
    rank 0 included, connects to it as a client: PyTorch's ``TORCHELASTIC_USE_AGENT_STORE=True``, torchrun's way.
    ``job_id``: the job's id, checked at the rendezvous (:mod:`allgpu.runtime.job_identity`).
    """
    local_world = len(devices)
    variables = {
        "RANK": str(rank_offset + local_rank),
        "WORLD_SIZE": str(world_size or local_world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(port),
        CLUSTER_SOURCE: "allgpu",
        DEVICES: ",".join(devices),
        ERROR_DIR: error_dir,
        # One CPU thread pool per replica would oversubscribe the cores (runtime/threads.py: the one policy).
        "OMP_NUM_THREADS": str(threads_per_replica(local_world)),
    }
    if timeout_s is not None:
        variables[TIMEOUT] = str(timeout_s)
    if launcher_store:
        variables["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if job_id:
        variables[JOB_ID] = job_id
    return variables


def worker_variables(*, cpu_only: bool, cluster_source: str | None, fresh_store: bool) -> dict[str, str]:
    """The allgpu variables ``allgpu run`` adds to every replica of the elastic launcher."""
    variables = {}
    if cpu_only:
        variables[DEVICE_KIND] = "cpu"
    if cluster_source:
        variables[CLUSTER_SOURCE] = cluster_source
    if fresh_store:
        variables[FRESH_STORE] = "1"
    return variables
