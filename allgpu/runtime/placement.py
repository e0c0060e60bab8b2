"""Start-up: from "a script and some devices" to "this process is replica r of N on device d".

:func:`place_replicas` is what every synchronous strategy's constructor calls, after validating its own
arguments. In order, it

1. joins the job of an engine that started one process per replica (:mod:`allgpu.runtime.engines`: torchrun,
   ``allgpu run``, ``allgpu.launch``, Ray Train, Slurm's ``srun`` tasks, one-process PyTorchJob pods), adopting
   the process group the engine made (Ray Train) or initialising it at the engine's rendezvous address;
2. joins a process group the user already initialised;
3. otherwise (a plain ``python train.py``) resolves the devices and, for N > 1, re-executes the script once per
   extra device (:class:`~allgpu.runtime.replicas.ScriptReplicas`) and becomes replica 0; under an engine that
   starts one process per node (SkyPilot, Kubeflow Trainer / JobSet, ``TF_CONFIG`` for multi-worker
   strategies) this machine's replicas are placed in the job it describes.

If a multi-device start fails (a GPU that is not there, a driver or NCCL error, a replica that never arrives),
``fallback="one_device"`` continues on one device with a warning saying why; ``fallback="error"`` raises
:class:`~allgpu.errors.StrategyStartError`. The result is a frozen :class:`Placement`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from allgpu.devices import Device, cuda_device_count, parse_device, resolve_replica_devices, why_no_gpu
from allgpu.errors import ArgumentError, StrategyStartError, warn_user
from allgpu.runtime.live import check_second
from allgpu.runtime import env as launch_env
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines import Cluster, discover, launcher
from allgpu.runtime.engines.slurm import batch_shell_hint
from allgpu.runtime.process_group import init_process_group, init_solo_group, release_solo_group, solo_group
from allgpu.runtime.replicas import ScriptReplicas, install_replica_excepthook, whole_lines
from allgpu.runtime.threads import threads_per_replica

FALLBACKS = ("one_device", "error")


@dataclass(frozen=True)
class Placement:
    """This process's place in the job, fixed at start-up.

    Attributes:
        rank / world_size: global replica index and number of replicas (``replica_id_in_sync``,
            ``num_replicas_in_sync``).
        local_rank / local_world_size: index among, and number of, this machine's replicas.
        device: the replica's ``torch.device``.
        timeout_s: collective timeout, seconds.
        owns_group: this process initialised the ``torch.distributed`` process group (and destroys it on close);
            False for a world of one or a group the user started.
        error_dir: where this replica leaves its traceback for the supervisor (None when none watches).
        source: who described the job: ``"torchrun"``, ``"allgpu"``, ``"TF_CONFIG"``, ``"user"`` or ``"single"``.
        fallback_reason: why a multi-device start fell back to one device, else None.
        solo_group: a world of one placed on the default group :func:`init_solo_group` made (released at close).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    timeout_s: float
    owns_group: bool = False
    error_dir: str | None = None
    source: str = "single"
    fallback_reason: str | None = None
    solo_group: bool = False

    @classmethod
    def single(cls, device: torch.device, timeout_s: float = launch_env.DEFAULT_TIMEOUT_S, *,
               fallback_reason: str | None = None, group: bool = False) -> "Placement":
        """A world of one on ``device``; with ``group``, on a world-of-one default process group
        (:func:`~allgpu.runtime.process_group.init_solo_group`), else with none."""
        if group:
            init_solo_group(device, timeout_s)
        return cls(0, 1, 0, 1, device, timeout_s, fallback_reason=fallback_reason, solo_group=group)


def validate_fallback(fallback: str) -> None:
    if fallback not in FALLBACKS:
        raise ArgumentError(f"fallback={fallback!r}; expected one of {FALLBACKS}.")


def validate_timeout(timeout: float | None) -> None:
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ArgumentError(f"timeout={timeout!r}; expected a positive number of seconds (or None for the default).")


def place_replicas(name: str, devices=None, num_replicas: int | None = None, *, timeout: float | None,
                   backend: str | None, fallback: str, cluster: Cluster | None = None,
                   multi_worker: bool = False) -> Placement:
    """Start or join the job; see the module docstring. ``name`` is the strategy's class name, for messages.

    Args:
        cluster: the job a cluster resolver described (``MultiWorkerMirroredStrategy(cluster_resolver)``); None:
            discover it (:func:`allgpu.runtime.engines.discover`). A launcher's environment wins over both.
        multi_worker: the strategy spans machines described by ``TF_CONFIG`` too (TensorFlow's multi-worker
            strategies); ``MirroredStrategy`` is one machine's, as in TensorFlow, but joins every other engine.

    Raises:
        DeviceError: bad device names (never fallen back from). ClusterConfigError: an inconsistent launcher
        environment. StrategyStartError: start failed with ``fallback="error"``.
    """
    launched = launch_env.read()
    timeout_s = launch_env.resolve_timeout(timeout, launched)
    engine = launcher(os.environ) or cluster or discover(tf_config=multi_worker)
    spec = engine.process if engine is not None else None
    wanted = len(resolve_replica_devices(num_replicas, devices)) if (num_replicas or devices) else None
    joins = dist.is_initialized() and not solo_group()  # a one-replica strategy's world of one is not a job
    if spec is not None or joins:  # a second strategy must not silently take another count
        check_second(name, wanted, joins_group=True)
    if spec is not None:
        if solo_group():  # a one-replica strategy made before the engine's variables were set
            release_solo_group(force=True)
        install_replica_excepthook(spec.rank, launched.error_dir)
        if wanted is not None and wanted != spec.local_world_size and spec.local_rank == 0:
            start = ("ScalingConfig(num_workers=...)" if spec.source == "Ray Train"  # not a launcher's flags
                     else "srun -n / --ntasks-per-node, --nproc-per-node")
            warn_user(f"{name} asks for {wanted} replicas here (devices/num_replicas), but {spec.source} started "
                      f"{spec.local_world_size} process{'es' if spec.local_world_size != 1 else ''} on this machine "
                      f"({spec.world_size} in the job), each one replica: the job runs {spec.world_size}. Fix: start "
                      f"{wanted} per machine ({start}), or leave devices and num_replicas out under a launcher.",
                      RuntimeWarning)
        if launched.error_dir:  # a replica allgpu started (launch-free, or allgpu run): its stdout is shared
            whole_lines()
        device = launched_device(spec.local_rank, launched)
        if wanted is None and not launched.devices and device.type == "cuda" and spec.local_rank == 0:
            hint = idle_gpus(spec, cuda_device_count())
            if hint:
                warn_user(f"{name}: {hint}", RuntimeWarning)
        # torchrun's variables name the rendezvous (under torchrun: the agent's store); an engine such as Slurm
        # names it only through its own variables, read into spec.
        env_init = "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ and "RANK" in os.environ
        init = "env://" if env_init else f"tcp://{spec.master_addr}:{spec.master_port}"
        return _joined(spec, device, timeout_s, backend, launched.error_dir, init_method=init)
    if joins:
        if wanted is not None and wanted != dist.get_world_size():
            raise StrategyStartError(
                f"{name} asks for {wanted} replicas, but this process already belongs to a process group of "
                f"{dist.get_world_size()} (torch.distributed.init_process_group was called). Fix: leave devices/"
                "num_replicas out to join it, or destroy_process_group() first.")
        local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return Placement(dist.get_rank(), dist.get_world_size(), local_rank, dist.get_world_size(),
                         launched_device(local_rank, launched), timeout_s, source="user")
    device_list = resolve_replica_devices(num_replicas, devices)
    if devices is None and num_replicas is None and len(device_list) == 1 and engine is None:
        _refuse_lone_spawn_worker(name)
    if devices is None and num_replicas is None and not device_list[0].is_cuda and engine is None:
        # tf.distribute logs the devices it took; a silent one-replica run on the CPU is the case to say why.
        warn_user(f"{name}() found no GPU, so it runs one replica on /cpu:0: {why_no_gpu()} For replicas on CPU "
                      "cores pass devices=['/cpu:0', '/cpu:1'] (or num_replicas=2); `allgpu doctor` explains the GPUs."
                      + batch_shell_hint(), RuntimeWarning)
    check_second(name, len(device_list), joins_group=False)
    if len(device_list) > 1:  # started by re-executing this program
        _refuse_multiprocessing_child(name, len(device_list))
    first = engine.first_replica(len(device_list)) if engine is not None else None
    return _start(name, device_list, timeout_s, backend, fallback, first)


def idle_gpus(spec: ClusterSpec, visible: int) -> str:
    """The sentence for a Slurm step (or submitit's local executor) that started fewer tasks on this machine than
    each sees GPUs (``srun -n 1`` or ``tasks_per_node=1`` with 8 GPUs): each task is one replica, so the other GPUs
    stay idle; "" when none does or for other engines (a launcher's process count is the user's own choice)."""
    if spec.source not in ("Slurm", "submitit (local)") or visible <= spec.local_world_size:
        return ""
    start = ("tasks_per_node" if spec.source.startswith("submitit") else "srun --ntasks-per-node / submitit "
             "tasks_per_node")
    return (f"{spec.source} started {spec.local_world_size} task{'s' if spec.local_world_size != 1 else ''} on this "
            f"machine, each one replica on one GPU, but each sees {visible} GPUs: {visible - spec.local_world_size} "
            f"stay idle. Fix: one task per GPU ({start}={visible}), or ask Slurm for as many GPUs as tasks "
            "(--gpus-per-task=1).")


def _refuse_lone_spawn_worker(name: str) -> None:
    """``mp.spawn(main, nprocs=N)`` kept from a DDP script (pytorch/examples' ddp-tutorial-series multigpu.py) with
    ``init_process_group`` dropped, on a machine where the strategy finds one device: each of the N processes
    trained a model of its own, silently (the warning spoke of the missing GPU only). Raised for the default
    devices only: ``devices=[...]`` given explicitly in a spawned worker keeps its one-replica run."""
    frame = sys._getframe()
    while frame is not None and not (frame.f_code.co_name == "_wrap"
                                     and frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "spawn.py"))
                                     and "torch" in frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return
    index = frame.f_locals.get("i", "?")
    raise StrategyStartError(
        f"{name}() runs in process {index} of torch.multiprocessing.spawn without a process group and found one "
        "device here, so each process mp.spawn started would train a model of its own (separate one-replica jobs). "
        "Fix: drop mp.spawn and call the worker once with devices=['/cpu:0', '/cpu:1'] (or num_replicas=N): the "
        "strategy starts the replicas; or allgpu.launch(fn, num_replicas=N); or keep mp.spawn and call "
        "torch.distributed.init_process_group(rank=i, world_size=N) before the strategy, which then joins it. To "
        "train one model per process on purpose, pass devices=['/cpu:0'].")


def _refuse_multiprocessing_child(name: str, count: int) -> None:
    """A process that ``torch.multiprocessing.spawn`` (or ``multiprocessing``) started cannot start replicas by
    re-executing its command line: that line is multiprocessing's (``python -c "...spawn_main(pipe_handle=6)"``,
    which failed in each copy with a bare ``OSError: [Errno 9] Bad file descriptor``; or, forked, the parent's
    script, which would spawn again), and each of its siblings would start a job of its own. Raised whatever
    ``fallback`` says: falling back would leave each sibling training alone."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None:
        return
    raise StrategyStartError(
        f"{name} would start {count} replicas by re-executing this program, but this process was started by "
        f"multiprocessing (torch.multiprocessing.spawn, as pytorch/examples' imagenet --multiprocessing-distributed "
        f"does; parent pid {parent.pid}): its command line cannot be re-executed, and each process the parent started "
        "would start a job of its own. Fix: call the worker function directly, without mp.spawn (the strategy starts "
        "one replica per device itself); or run it under allgpu.launch(fn, num_replicas=N) (fn gets no process "
        "index: use strategy.replica_id_in_sync); or keep mp.spawn and call torch.distributed.init_process_group("
        "rank=i, world_size=N) before the strategy, which then joins that group.")


def launched_device(local_rank: int, launched: launch_env.LaunchEnv) -> torch.device:
    """The device of local replica ``local_rank`` in a launched job: the launcher's list, else CPU when asked or
    when no GPU is visible, else ``cuda:local_rank`` (modulo the visible count)."""
    if launched.devices:
        return parse_device(launched.devices[local_rank % len(launched.devices)]).torch_device()
    if launched.cpu_only or cuda_device_count() == 0:
        return torch.device("cpu")
    return torch.device("cuda", local_rank % cuda_device_count())


def _joined(spec: ClusterSpec, device: torch.device, timeout_s: float, backend: str | None,
            error_dir: str | None = None, init_method: str = "env://") -> Placement:
    owns = init_process_group(spec, device, timeout_s, backend=backend, init_method=init_method)
    placement = Placement(spec.rank, spec.world_size, spec.local_rank, spec.local_world_size, device, timeout_s,
                          owns_group=owns, error_dir=error_dir, source=spec.source)
    share_cpu_threads(placement)
    return placement


def _start(name: str, devices: list[Device], timeout_s: float, backend: str | None, fallback: str,
           first: ClusterSpec | None) -> Placement:
    """Start this machine's replicas. ``first`` is this worker's first replica in a multi-worker job
    (global rank, world size, rendezvous address); None for a job on this machine alone."""
    replicas = None
    try:
        _check_visible(devices)
        if len(devices) == 1 and first is None:
            return Placement.single(devices[0].torch_device(), timeout_s, group=True)
        if solo_group():  # left by one-replica strategies no longer alive (check_second stops a live one)
            release_solo_group(force=True)
        if first is None:
            first = ClusterSpec(0, len(devices), 0, len(devices), "127.0.0.1", 0, "allgpu")
        replicas = ScriptReplicas(devices, timeout_s, rank_offset=first.rank, world_size=first.world_size,
                                  master_addr=first.master_addr, master_port=first.master_port or None, job=first.job)
        replicas.start()
        spec = ClusterSpec(first.rank, first.world_size, 0, len(devices), first.master_addr, replicas.port,
                           first.source, replicas.job_id)
        placement = _joined(spec, devices[0].torch_device(), timeout_s, backend,
                            init_method=f"tcp://{spec.master_addr}:{spec.master_port}")
        replicas.joined()
        return placement
    except Exception as exc:  # driver, NCCL, rendezvous: every start failure is handled the same way
        reason = str(exc).rstrip(". ")
        if replicas is not None:
            states = replicas.describe(1.0) if replicas.started_any else ""
            reason += f" ({states})" if states else ""
            replicas.stop()
        if dist.is_initialized():
            dist.destroy_process_group()
        names = [str(d) for d in devices]
        if fallback == "error":
            raise StrategyStartError(
                f"{name} could not start on {names}: {reason}. Fix: run `allgpu doctor`, or pass "
                "fallback='one_device' to continue on one device."
            ) from exc
        one = Device("cuda", 0) if cuda_device_count() else Device("cpu", 0)
        warn_user(
            f"{name} could not start on {names}: {reason}. Continuing on one device ({one}) because "
            "fallback='one_device'; pass fallback='error' to stop instead.",
            RuntimeWarning)
        return Placement.single(one.torch_device(), timeout_s, fallback_reason=reason, group=True)


def _check_visible(devices: list[Device]) -> None:
    missing = [d for d in devices if d.is_cuda and d.index >= cuda_device_count()]
    if missing:
        count = cuda_device_count()
        raise StrategyStartError(f"{', '.join(map(str, missing))} not available: "
                           + (why_no_gpu() if count == 0 else f"only {count} GPUs are visible"))


def share_cpu_threads(placement: Placement) -> None:
    """N CPU replicas each with a full intra-op pool oversubscribe the cores and run slower than one
    (:mod:`allgpu.runtime.threads`, the one policy)."""
    if placement.device.type == "cpu" and placement.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(threads_per_replica(placement.local_world_size))
