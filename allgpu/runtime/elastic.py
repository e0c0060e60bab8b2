"""``allgpu run``: start a script's replicas on PyTorch's elastic launcher (``torch.distributed.elastic``).

This is ``torchrun`` with allgpu's defaults; it builds a :class:`torch.distributed.launcher.api.LaunchConfig`
and calls :class:`~torch.distributed.launcher.api.elastic_launch`, so restarts, c10d rendezvous and
multi-node membership are PyTorch's own. What allgpu adds:

- ``nproc_per_node="auto"``: one replica per visible GPU; with no GPU it is an error asking for
  ``cpu_replicas=K``, never a silent CPU run (the seeds' most common complaint is a job that quietly
  trained on the wrong device).
- ``cpu_replicas=K``: K replicas on the CPU (Gloo); they see ``ALLGPU_DEVICE=cpu`` (:mod:`allgpu.runtime.env`).
- A single-node job binds the rendezvous to loopback (``127.0.0.1``, a free port chosen by the OS) unless an
  endpoint is given, so nothing listens on the network by accident.
- ``node_rank`` (or ``tf_config``) selects PyTorch's *static* rendezvous: fixed membership, the node with
  rank 0 hosts the store at the endpoint, ranks follow the node order (what a ``TF_CONFIG`` describes).
  Without it the *c10d* rendezvous assigns node ranks itself and allows ``MIN:MAX`` nodes.
- Restarts work with both: each attempt gets a fresh store (works around pytorch/pytorch#135712, where a
  restarted group read the previous attempt's keys and hung).
- A failed run returns the failing replica's exit code and prints which replica failed with its
  traceback (each replica runs under :func:`torch.distributed.elastic.multiprocessing.errors.record`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import uuid
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from allgpu.errors import ClusterConfigError, DeviceError, ScriptNotFoundError
from allgpu.runtime import env as launch_env
from allgpu.runtime.agent_stop import ending_frozen_replicas, stopped_replicas, stopped_words
from allgpu.runtime.interrupt import SIGINT_WORDS
from allgpu.runtime.cluster import from_tf_config_env, split_host_port
from allgpu.runtime.engines.slurm import check_launcher_per_task
from allgpu.runtime.threads import threads_per_replica

LOOPBACK = "127.0.0.1"
RESTART_ERROR = "RestartError: "  # how a replica's RestartError begins in its error file


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the elastic launcher needs, resolved and validated (no processes started yet).

    Attributes:
        min_nodes / max_nodes: node count bounds (equal unless ``--nnodes MIN:MAX``).
        nproc_per_node: replicas per node.
        rdzv_backend: ``"c10d"`` (dynamic membership) or ``"static"`` (fixed node ranks).
        rdzv_endpoint: ``host:port`` of the rendezvous store (port 0: the OS picks a free one).
        rdzv_id: run id shared by every node of one job.
        node_rank: this node's rank with the static backend, else None.
        local_addr: the address other nodes reach this one at (loopback for a loopback job).
        max_restarts / monitor_interval: restart budget, and seconds between health checks.
        worker_env: variables added to each replica's environment.
        argv: the replica command after the interpreter (``-m allgpu.runtime.replica_main script args``).
    """

    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    rdzv_backend: str
    rdzv_endpoint: str
    rdzv_id: str
    node_rank: int | None
    local_addr: str | None
    max_restarts: int
    monitor_interval: float
    worker_env: Mapping[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ()

    def launch_config(self):
        """The :class:`torch.distributed.launcher.api.LaunchConfig` for this plan."""
        from torch.distributed.launcher.api import LaunchConfig

        rdzv_configs: dict[str, object] = {}
        if self.rdzv_backend == "static":
            rdzv_configs["rank"] = self.node_rank
        return LaunchConfig(
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            nproc_per_node=self.nproc_per_node,
            run_id=self.rdzv_id,
            role="replica",
            rdzv_endpoint=self.rdzv_endpoint,
            rdzv_backend=self.rdzv_backend,
            rdzv_configs=rdzv_configs,
            max_restarts=self.max_restarts,
            monitor_interval=self.monitor_interval,
            start_method="spawn",
            local_addr=self.local_addr,
        )


def parse_nnodes(nnodes: str | int) -> tuple[int, int]:
    """``"N"`` or ``"MIN:MAX"`` -> ``(min_nodes, max_nodes)``, as ``torchrun --nnodes``.

    Raises:
        ClusterConfigError: not of that form, or not ``1 <= MIN <= MAX``.
    """
    text = str(nnodes).strip()
    parts = text.split(":")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ClusterConfigError(
            f"--nnodes {nnodes!r}: expected a node count N or a range MIN:MAX of positive integers, e.g. 2 or 1:4."
        )
    lo, hi = int(parts[0]), int(parts[-1])
    if not 1 <= lo <= hi:
        raise ClusterConfigError(f"--nnodes {nnodes!r}: expected 1 <= MIN <= MAX, e.g. 2 or 1:4.")
    return lo, hi


def resolve_nproc(nproc_per_node: str | int, cpu_replicas: int | None) -> tuple[int, bool]:
    """Replicas per node and whether they run on the CPU.

    ``"auto"`` is ``torch.cuda.device_count()`` (honours ``CUDA_VISIBLE_DEVICES``).

    Raises:
        DeviceError: ``"auto"`` on a machine with no visible GPU and no ``cpu_replicas``; a count < 1;
            ``cpu_replicas`` that disagrees with an explicit ``nproc_per_node``.
    """
    if cpu_replicas is not None:
        if isinstance(cpu_replicas, bool) or not isinstance(cpu_replicas, int) or cpu_replicas < 1:
            raise DeviceError(f"--cpu-replicas {cpu_replicas!r}: expected a positive integer, e.g. --cpu-replicas 2.")
        if str(nproc_per_node) not in ("auto", str(cpu_replicas)):
            raise DeviceError(
                f"--nproc-per-node {nproc_per_node} disagrees with --cpu-replicas {cpu_replicas}. "
                "Fix: pass only --cpu-replicas K for K CPU replicas per node."
            )
        return cpu_replicas, True
    if str(nproc_per_node) == "auto":
        import torch

        count = torch.cuda.device_count()
        if count == 0:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
            raise DeviceError(
                f"--nproc-per-node auto found no visible GPU{hint}: torch {torch.__version__} sees "
                f"{count} CUDA devices. Fix: pass --cpu-replicas K to run K replicas on the CPU with Gloo, or "
                "run `allgpu doctor` to see why the GPUs are not visible."
            )
        return count, False
    text = str(nproc_per_node).strip()
    if not text.isdigit() or int(text) < 1:
        raise DeviceError(f"--nproc-per-node {nproc_per_node!r}: expected 'auto' or a positive integer.")
    return int(text), False


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        import ipaddress

        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _from_tf_config(env, nnodes, node_rank, rdzv_endpoint) -> tuple[str, int, str]:
    """``(nnodes, node_rank, rdzv_endpoint)`` from ``TF_CONFIG``; flags given as well must agree with it."""
    tf = from_tf_config_env(env)
    if tf is None:
        raise ClusterConfigError(
            "--tf-config was given but TF_CONFIG is unset or empty. Fix: export TF_CONFIG='{\"cluster\": "
            "{\"worker\": [\"host0:2222\", \"host1:2222\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}'."
        )
    for flag, given, derived in (
        ("--nnodes", None if str(nnodes) == "1" else str(nnodes), str(tf.num_workers)),
        ("--node-rank", None if node_rank is None else str(node_rank), str(tf.worker_index)),
        ("--rdzv-endpoint", rdzv_endpoint, tf.rendezvous),
    ):
        if given is not None and given != derived:
            raise ClusterConfigError(
                f"{flag} {given} contradicts TF_CONFIG, which gives {derived}. Fix: drop {flag} or --tf-config."
            )
    return str(tf.num_workers), tf.worker_index, tf.rendezvous


def _check_node_rank(node_rank, nnodes, min_nodes: int, max_nodes: int, rdzv_endpoint) -> str:
    """Validate a fixed node rank; returns the rendezvous backend it needs, ``"static"``."""
    if min_nodes != max_nodes:
        raise ClusterConfigError(
            f"--node-rank {node_rank} with --nnodes {nnodes}: fixed node ranks need a fixed node count. "
            "Fix: pass --nnodes N, or drop --node-rank to let the c10d rendezvous number the nodes."
        )
    if isinstance(node_rank, bool) or not isinstance(node_rank, int) or not 0 <= node_rank < max_nodes:
        raise ClusterConfigError(f"--node-rank {node_rank!r}: expected an integer 0 <= R < {max_nodes} (--nnodes).")
    if rdzv_endpoint is None:
        raise ClusterConfigError(
            "--node-rank needs --rdzv-endpoint HOST:PORT, the address of node 0 where the store listens."
        )
    return "static"


def _endpoint(rdzv_endpoint, nnodes, max_nodes: int) -> tuple[str, str | None]:
    """``(endpoint, local_addr)``: loopback with a free port for a one-node job without an endpoint."""
    if rdzv_endpoint is None:
        if max_nodes > 1:
            raise ClusterConfigError(
                f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT that every node can reach (e.g. the first "
                "host's address and a free port such as 29400), and the same --rdzv-id on every node. "
                "Without it allgpu binds the rendezvous to loopback, which other machines cannot reach."
            )
        return f"{LOOPBACK}:0", LOOPBACK
    host, port = split_host_port(rdzv_endpoint, "--rdzv-endpoint")
    if port == 0 and max_nodes > 1:
        raise ClusterConfigError(f"--rdzv-endpoint {rdzv_endpoint}: a multi-node job needs a fixed port.")
    return rdzv_endpoint, LOOPBACK if _is_loopback(host) else None


def plan(
    script: str,
    args: Sequence[str] = (),
    *,
    nproc_per_node: str | int = "auto",
    nnodes: str | int = "1",
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    node_rank: int | None = None,
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    cpu_replicas: int | None = None,
    tf_config: bool = False,
    env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """Validate the options of :func:`run` and resolve them into a :class:`LaunchPlan`.

    Raises:
        ClusterConfigError: bad ``nnodes`` / endpoint / node rank / restarts, a multi-node job without an
            endpoint, or ``tf_config`` without a valid ``TF_CONFIG`` (or contradicting the flags).
        DeviceError: see :func:`resolve_nproc`.
        FileNotFoundError: ``script`` does not exist.
    """
    env = os.environ if env is None else env
    if not os.path.isfile(script):
        what = "is a folder, not a script" if os.path.isdir(script) else "not found"
        raise ScriptNotFoundError(f"script {script!r} {what} (cwd {os.getcwd()}). Fix: give the path of the Python "
                                  "training script: allgpu run [options] train.py [args]")
    cluster_source = None
    if tf_config:
        nnodes, node_rank, rdzv_endpoint = _from_tf_config(env, nnodes, node_rank, rdzv_endpoint)
        cluster_source = "TF_CONFIG"

    min_nodes, max_nodes = parse_nnodes(nnodes)
    check_launcher_per_task(env, max_nodes)  # `srun -n 2 allgpu run train.py`: two jobs of one node each
    nproc, on_cpu = resolve_nproc(nproc_per_node, cpu_replicas)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ClusterConfigError(f"--max-restarts {max_restarts!r}: expected an integer >= 0.")
    if not monitor_interval > 0:
        raise ClusterConfigError(f"--monitor-interval {monitor_interval!r}: expected seconds > 0, e.g. 0.1.")

    backend = "c10d" if node_rank is None else _check_node_rank(node_rank, nnodes, min_nodes, max_nodes,
                                                                rdzv_endpoint)
    rdzv_endpoint, local_addr = _endpoint(rdzv_endpoint, nnodes, max_nodes)
    if rdzv_id is None:
        rdzv_id = uuid.uuid4().hex if max_nodes == 1 else "allgpu"
    return LaunchPlan(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        rdzv_backend=backend,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=str(rdzv_id),
        node_rank=node_rank,
        local_addr=local_addr,
        max_restarts=max_restarts,
        monitor_interval=float(monitor_interval),
        # A fresh store per attempt (allgpu.runtime.attempt_store.use_fresh_store): restarts need it.
        worker_env=launch_env.worker_variables(cpu_only=on_cpu, cluster_source=cluster_source,
                                               fresh_store=backend == "static"),
        argv=("-m", "allgpu.runtime.replica_main", script, *args),
    )


@contextlib.contextmanager
def _environ(updates: Mapping[str, str]) -> Iterator[None]:
    """Set variables for the replicas (they inherit the launcher's environment) and restore them after."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def exit_code(exitcode: int) -> int:
    """A replica's exit status as a shell reports it: a signal N is ``128 + N``."""
    return 128 - exitcode if exitcode < 0 else exitcode


def describe_failure(error, max_restarts: int) -> str:
    """Text naming the first failed replica, its exit status and traceback, then any others.

    ``error`` is a :class:`torch.distributed.elastic.multiprocessing.errors.ChildFailedError`.
    """
    rank, first = error.get_first_failure()
    lines = [
        f"allgpu run: replica {rank} (local rank {first.local_rank} on {socket.gethostname()}, pid {first.pid}) "
        f"failed with {_status(first)}"
        + (f" after {max_restarts} restart(s)." if max_restarts else "."),
    ]
    message = first.message
    if isinstance(message, dict) and str(message.get("message", "")).startswith(RESTART_ERROR):
        lines.append(message["message"])  # allgpu's own error, complete in itself: no traceback of allgpu's code
    elif isinstance(message, dict):
        trace = message.get("extraInfo", {}).get("py_callstack") or message.get("message", "")
        lines += [f"Traceback of replica {rank}:", trace.rstrip()]
    elif message:
        lines.append(str(message))
    others = [stopped_words(r, f, _status(f), first) for r, f in sorted(error.failures.items()) if r != rank]
    if others:
        lines.append("The other replicas: " + "; ".join(others) + ".")
    return "\n".join(lines)


def node_zero_gone(p: LaunchPlan, error: Exception) -> str:
    """What ``allgpu run`` says when the elastic agent lost node 0's store (``error``) while restarting."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (f"allgpu run: RestartError: node {p.node_rank} could not restart its replicas: node 0's launcher (its "
            f"store at {p.rdzv_endpoint}) has ended ({reason}); its replicas finished, or it stopped. A launcher "
            "does not restart replicas that finished, so the job cannot be gathered again (the failure that "
            "restarted this node is printed above). Fix: make every replica reach the same end, then run the job again on every node.")


def _status(failure) -> str:
    if failure.exitcode < 0:
        return f"signal {failure.signal_name()} (exit code {exit_code(failure.exitcode)})"
    return f"exit code {failure.exitcode}"


def run(script: str, args: Sequence[str] = (), **options) -> int:
    """Run ``python script.py *args`` as ``nproc_per_node`` replicas on this node under the elastic launcher.

    Each replica gets torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``, ...), so ``init_process_group()`` with
    the default ``env://`` init and allgpu's strategies join the job. ``options`` are :func:`plan`'s keyword
    arguments (``nproc_per_node``, ``nnodes``, ``rdzv_endpoint``, ``rdzv_id``, ``node_rank``, ``max_restarts``,
    ``monitor_interval``, ``cpu_replicas``, ``tf_config``), as ``allgpu run``'s flags.

    Returns:
        0 when every replica succeeded; otherwise the first failed replica's exit code (``128 + N`` for
        signal N), after its rank and traceback were printed to stderr; ``128 + N`` when the launcher itself
        received signal N.

    Raises:
        ClusterConfigError, DeviceError, FileNotFoundError: invalid options, before anything starts.
    """
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    p = plan(script, args, **options)
    env = dict(p.worker_env)
    if "OMP_NUM_THREADS" not in os.environ and p.nproc_per_node > 1:
        env["OMP_NUM_THREADS"] = str(threads_per_replica(p.nproc_per_node))  # N pools of every core oversubscribe
    if "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in os.environ:
        # The c10d rendezvous shares its TCPStore with the replicas and keeps it across restarts, so a
        # restarted group reads the previous attempt's keys and hangs in init_process_group
        # (pytorch/pytorch#135712, seen with torch 2.13). Unshared, rank 0 hosts a fresh store per attempt.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    with _environ(env), ending_frozen_replicas():
        try:
            elastic_launch(p.launch_config(), sys.executable)(*p.argv)
        except ChildFailedError as error:
            print(describe_failure(error, p.max_restarts), file=sys.stderr, flush=True)
            return exit_code(error.get_first_failure()[1].exitcode) or 1
        except DistError as error:  # node 0's launcher (the static rendezvous's store) ended during a restart
            if p.rdzv_backend != "static":
                raise
            print(node_zero_gone(p, error), file=sys.stderr, flush=True)
            return 1
        except SignalException as error:
            name = signal.Signals(error.sigval).name
            words = f" ({SIGINT_WORDS.removeprefix('SIGINT: ')})" if name == "SIGINT" else ""
            print(f"allgpu run: interrupted by {name}{words}; stopped {stopped_replicas()}.", file=sys.stderr,
                  flush=True)
            return 128 + int(error.sigval)
    return 0
