"""Who is in the job: the torchrun (elastic launcher) environment, or a ``TF_CONFIG`` cluster description.

Glossary (as in ``torch.distributed``): *rank* is a replica's global index, *world size* the number of
replicas in the job, *local rank* a replica's index on its own machine (node). TensorFlow's *task* is one
machine's entry in the cluster, what ``torchrun`` calls a *node*; each node runs ``local_world_size`` replicas.

A ``TF_CONFIG`` (see TensorFlow's ``tf.distribute.cluster_resolver.TFConfigClusterResolver`` and the
multi-worker training guide) is a JSON object set on every machine::

    {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
     "task": {"type": "worker", "index": 0}}

Following TensorFlow's ``MultiWorkerMirroredStrategy``, the chief is a worker too: it is worker 0, and the
``"worker"`` entries follow it in list order. Without a chief, ``worker[0]`` is worker 0. Worker 0's
``host:port`` is the rendezvous address of the job.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime import env as launch_env

_TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_EXAMPLE = '{"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}}'
_TRAINING_ROLES = ("chief", "worker")


@dataclass(frozen=True)
class ClusterSpec:
    """One replica's place in the job.

    Attributes:
        rank: global replica index, ``0 <= rank < world_size``.
        world_size: number of replicas in the job (``num_replicas_in_sync``).
        local_rank: index on this node; selects the device (``cuda:local_rank``).
        local_world_size: replicas on this node.
        master_addr / master_port: rendezvous address of the ``env://`` process-group init.
        source: where the description came from (``"torchrun"``, ``"TF_CONFIG"``, ``"allgpu"``).
        job: the job's id in words where its engine gives one (``"Slurm job 42 step 0"``), else None; checked at
            the rendezvous (:mod:`allgpu.runtime.job_identity`).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    source: str = "torchrun"
    job: str | None = None


def _int(env: Mapping[str, str], key: str, source: str) -> int:
    raw = env[key]
    try:
        return int(raw)
    except ValueError:
        raise ClusterConfigError(
            f"{key}={raw!r} in the {source} environment is not an integer; "
            f"expected e.g. {key}=0. Fix: launch with torchrun / `allgpu run`, which set it for you."
        ) from None


def from_torchrun_env(env: Mapping[str, str] | None = None) -> ClusterSpec | None:
    """Read the variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT``).

    Returns None when the process was not started by a launcher (``RANK`` and ``WORLD_SIZE`` unset).

    Raises:
        ClusterConfigError: some but not all variables are set, or they are inconsistent.
    """
    env = os.environ if env is None else env
    present = [k for k in _TORCHRUN_KEYS if k in env]
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    missing = [k for k in _TORCHRUN_KEYS if k not in env and k != "LOCAL_RANK"]
    if missing:
        raise ClusterConfigError(
            f"the launcher environment is incomplete: {', '.join(present)} set but {', '.join(missing)} "
            "missing. Fix: start the script with `torchrun` or `allgpu run`, or unset RANK/WORLD_SIZE "
            "for a launch-free start."
        )
    rank = _int(env, "RANK", "torchrun")
    world = _int(env, "WORLD_SIZE", "torchrun")
    local_rank = _int(env, "LOCAL_RANK", "torchrun") if "LOCAL_RANK" in env else rank
    local_world = _int(env, "LOCAL_WORLD_SIZE", "torchrun") if "LOCAL_WORLD_SIZE" in env else world
    if world < 1 or not 0 <= rank < world:
        raise ClusterConfigError(
            f"RANK={rank} with WORLD_SIZE={world}: rank must satisfy 0 <= RANK < WORLD_SIZE."
        )
    return ClusterSpec(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=env["MASTER_ADDR"],
        master_port=_int(env, "MASTER_PORT", "torchrun"),
        source=launch_env.read(env).cluster_source or "torchrun",
        job=launch_env.read(env).job_id,
    )


@dataclass(frozen=True)
class TFConfig:
    """A validated ``TF_CONFIG`` for synchronous multi-worker training.

    Attributes:
        workers: ``host:port`` of every worker in worker order (the chief first when there is one).
        task_type: this task's role as written, ``"chief"`` or ``"worker"``.
        task_index: this task's index within its role list, as written.
        worker_index: this task's position in ``workers`` (the node rank): the chief is 0, and
            ``worker[i]`` is ``i + 1`` with a chief, ``i`` without.
    """

    workers: tuple[str, ...]
    task_type: str
    task_index: int
    worker_index: int

    @property
    def num_workers(self) -> int:
        """Number of workers (nodes) in the job, the chief included."""
        return len(self.workers)

    @property
    def rendezvous(self) -> str:
        """Worker 0's ``host:port``, where the rendezvous store lives."""
        return self.workers[0]

    @property
    def rendezvous_host(self) -> str:
        return split_host_port(self.workers[0], "cluster")[0]

    @property
    def rendezvous_port(self) -> int:
        return split_host_port(self.workers[0], "cluster")[1]

    def to_cluster_spec(self, local_world_size: int, local_rank: int) -> ClusterSpec:
        """This replica's place in the job when each worker runs ``local_world_size`` replicas.

        Rule (the same as ``torchrun`` with a static node rank): ranks are numbered worker by worker,
        ``rank = worker_index * local_world_size + local_rank`` and
        ``world_size = num_workers * local_world_size``; every worker must run the same number of replicas.

        Raises:
            ClusterConfigError: ``local_world_size < 1`` or ``local_rank`` outside ``[0, local_world_size)``.
        """
        if isinstance(local_world_size, bool) or not isinstance(local_world_size, int) or local_world_size < 1:
            raise ClusterConfigError(
                f"local_world_size={local_world_size!r}: expected a positive int, the number of replicas "
                "on this worker (e.g. one per GPU)."
            )
        if isinstance(local_rank, bool) or not isinstance(local_rank, int) or not 0 <= local_rank < local_world_size:
            raise ClusterConfigError(
                f"local_rank={local_rank!r} with local_world_size={local_world_size}: expected "
                f"0 <= local_rank < {local_world_size}."
            )
        return ClusterSpec(
            rank=self.worker_index * local_world_size + local_rank,
            world_size=self.num_workers * local_world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            master_addr=self.rendezvous_host,
            master_port=self.rendezvous_port,
            source="TF_CONFIG",
        )


def split_host_port(address: Any, field: str) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6addr]:port"``) into ``(host, port)``.

    Raises:
        ClusterConfigError: not a string, no port, a port outside 1..65535, or an empty host;
            the message names ``field``.
    """
    fix = f'Fix: write each address as "host:port", e.g. "10.0.0.1:2222" or "[::1]:2222", in {field}.'
    if not isinstance(address, str):
        raise ClusterConfigError(f"{field} holds {address!r}, not a \"host:port\" string. {fix}")
    text = address.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ClusterConfigError(f"{field} holds {address!r}: an IPv6 address needs \"[addr]:port\". {fix}")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ClusterConfigError(f"{field} holds {address!r}: {host!r} is not an IPv6 address. {fix}") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ClusterConfigError(f"{field} holds {address!r}, which has no port. {fix}")
        if ":" in host:
            raise ClusterConfigError(f"{field} holds {address!r}: put an IPv6 host in brackets. {fix}")
    if not host:
        raise ClusterConfigError(f"{field} holds {address!r}, which has no host. {fix}")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ClusterConfigError(f"{field} holds {address!r}: port {port_text!r} is not in 1..65535. {fix}")
    return host, int(port_text)


def _role_error(role: str, where: str) -> ClusterConfigError:
    if role == "ps":
        why = (
            '"ps" (parameter server) tasks belong to ParameterServerStrategy\'s asynchronous training; '
            "MultiWorkerMirroredStrategy and `allgpu run` are synchronous and have no parameter servers. "
            'Fix: remove "ps" from TF_CONFIG, or use allgpu.ParameterServerStrategy for that job.'
        )
    elif role == "evaluator":
        why = (
            'a side-car "evaluator" task is not supported yet. Fix: remove it from TF_CONFIG and evaluate '
            "in the training job (fit(validation_data=...)) or in a separate single-machine process."
        )
    else:
        why = f'expected one of {list(_TRAINING_ROLES)}. Fix: rename the role ("master" is TF1\'s name for "chief").'
    return ClusterConfigError(f"TF_CONFIG {where}: {why}")


def _list_of_addresses(cluster: Mapping[str, Any], role: str) -> list[str]:
    entries = cluster[role]
    if not isinstance(entries, list) or not entries:
        raise ClusterConfigError(
            f"TF_CONFIG cluster.{role} is {entries!r}: expected a non-empty list of \"host:port\" strings. "
            f"Example: {_EXAMPLE}"
        )
    for i, entry in enumerate(entries):
        split_host_port(entry, f"TF_CONFIG cluster.{role}[{i}]")
    return [e.strip() for e in entries]


def parse_tf_config(text: str) -> TFConfig:
    """Parse and validate a ``TF_CONFIG`` JSON string for synchronous multi-worker training.

    Raises:
        ClusterConfigError: naming the field, its value and the fix, when the text is not JSON, ``cluster``
            or ``task`` is missing or mistyped, ``task.type`` has no list in ``cluster``, ``task.index`` is
            out of range, an address is not ``host:port``, an address appears twice, there is more than one
            chief, or a ``"ps"`` / ``"evaluator"`` / unknown role appears.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ClusterConfigError(
            f"TF_CONFIG is not valid JSON ({exc}): {str(text)[:80]!r}. Fix: set it to a JSON object such as "
            f"{_EXAMPLE}"
        ) from None
    if not isinstance(data, dict):
        raise ClusterConfigError(f"TF_CONFIG is {type(data).__name__} {data!r}, expected a JSON object like {_EXAMPLE}")
    for key in ("cluster", "task"):
        if key not in data:
            raise ClusterConfigError(f'TF_CONFIG has no "{key}" field (keys: {sorted(data)}). Example: {_EXAMPLE}')
        if not isinstance(data[key], dict):
            raise ClusterConfigError(f"TF_CONFIG {key} is {data[key]!r}, expected a JSON object. Example: {_EXAMPLE}")
    cluster, task = data["cluster"], data["task"]

    for role in cluster:
        if role not in _TRAINING_ROLES:
            raise _role_error(role, f"cluster has the role {role!r}")
    if "worker" not in cluster and "chief" not in cluster:
        raise ClusterConfigError(f"TF_CONFIG cluster is {cluster!r}: it lists no \"worker\". Example: {_EXAMPLE}")
    chief = _list_of_addresses(cluster, "chief") if "chief" in cluster else []
    if len(chief) > 1:
        raise ClusterConfigError(
            f"TF_CONFIG cluster.chief lists {len(chief)} addresses {chief}: there is at most one chief. "
            'Fix: keep one and move the others to "worker".'
        )
    workers = chief + (_list_of_addresses(cluster, "worker") if "worker" in cluster else [])
    seen: dict[str, int] = {}
    for i, address in enumerate(workers):
        if address in seen:
            raise ClusterConfigError(
                f"TF_CONFIG cluster lists {address!r} twice (workers {seen[address]} and {i}, chief first): "
                "each task needs its own host:port. Fix: give each task a distinct address or port."
            )
        seen[address] = i

    task_type = task.get("type")
    if task_type is None:
        raise ClusterConfigError(f'TF_CONFIG task is {task!r}: it has no "type". Fix: add "type": "worker".')
    if task_type not in _TRAINING_ROLES:
        raise _role_error(str(task_type), f"task.type is {task_type!r}")
    if task_type not in cluster:
        raise ClusterConfigError(
            f"TF_CONFIG task.type is {task_type!r} but cluster has no {task_type!r} list (roles: "
            f"{sorted(cluster)}). Fix: set task.type to one of those roles."
        )
    index = task.get("index", 0)
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index)  # TensorFlow accepts "index": "1" too
    size = len(cluster[task_type])
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise ClusterConfigError(
            f"TF_CONFIG task.index is {index!r} but cluster.{task_type} has {size} entr"
            f"{'y' if size == 1 else 'ies'}: expected an integer 0 <= index < {size}. "
            f"Fix: set task.index to this machine's position in cluster.{task_type}."
        )
    worker_index = index + (len(chief) if task_type == "worker" else 0)
    return TFConfig(workers=tuple(workers), task_type=task_type, task_index=index, worker_index=worker_index)


def from_tf_config_env(env: Mapping[str, str] | None = None) -> TFConfig | None:
    """Read ``TF_CONFIG`` from the environment; None when it is unset or blank.

    Raises:
        ClusterConfigError: as :func:`parse_tf_config`.
    """
    env = os.environ if env is None else env
    text = env.get("TF_CONFIG", "")
    if not text.strip():
        return None
    return parse_tf_config(text)


def from_env(
    env: Mapping[str, str] | None = None, *, local_world_size: int = 1, local_rank: int = 0
) -> ClusterSpec | None:
    """This replica's place in the job, from the launcher if one started it, else from ``TF_CONFIG``.

    The torchrun environment wins: ``allgpu run --tf-config`` turns ``TF_CONFIG`` into it, and a replica
    started by any launcher is already placed. A bare ``TF_CONFIG`` (one process per machine started by
    hand or by a TensorFlow-style job) uses ``local_world_size`` / ``local_rank`` for the replicas on this
    machine; see :meth:`TFConfig.to_cluster_spec` for the rank rule.
    Returns None when neither is set (a single-machine, launch-free start).

    Raises:
        ClusterConfigError: either description is malformed or inconsistent.
    """
    env = os.environ if env is None else env
    spec = from_torchrun_env(env)
    if spec is not None:
        return spec
    tf = from_tf_config_env(env)
    return None if tf is None else tf.to_cluster_spec(local_world_size, local_rank)
