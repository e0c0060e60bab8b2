"""``MirroredStrategy``: synchronous data parallelism, one replica per device (``tf.distribute.MirroredStrategy``).

Start-up, in order:

1. under torchrun / ``allgpu run`` / ``allgpu.launch`` (``RANK`` and ``WORLD_SIZE`` set): join that job;
2. with a process group already initialised: join it;
3. otherwise (a plain ``python train.py``): resolve the devices; for N > 1, re-execute the script once per extra
   device (loopback rendezvous on a free port) and become replica 0.

If multi-device start fails (a GPU that is not there, a driver or NCCL error, a replica that never arrives),
``fallback="one_device"`` continues on one device with a warning saying why; ``fallback="error"`` raises.
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist

from allgpu.cluster import ClusterSpec, from_torchrun_env
from allgpu.devices import Device, cuda_device_count, resolve_replica_devices, why_no_gpu
from allgpu.errors import StrategyStartError
from allgpu.live import check_second
from allgpu.launch import ScriptReplicas, install_replica_excepthook, launched_settings
from allgpu.replica_group import ReplicaGroup
from allgpu.strategies.base import Strategy

FALLBACKS = ("one_device", "error")


class MirroredStrategy(Strategy):
    """One replica per device; parameters mirrored; gradients all-reduced during backward.

    Args:
        devices: device names (``["/gpu:0", "/gpu:1"]``, ``["/cpu:0", "/cpu:1"]`` for CPU replicas on Gloo);
            None for every visible GPU (one CPU replica when there is none).
        num_replicas: instead of ``devices``: the first N GPUs, or N CPU replicas on a machine without GPUs.
        fallback: ``"one_device"`` (default) or ``"error"``, when multi-device start fails.
        timeout: collective timeout in seconds; a replica that does not arrive in time is named in the error.
        backend: process-group backend; default NCCL on CUDA, Gloo on CPU.
        bucket_cap_mb: gradient bucket size in MiB.
        gradient_compression: None, ``"bf16"`` or ``"fp16"``: send float32 gradients in 16 bits (half the
            bytes; for communication-bound jobs, as the step monitor suggests).
        broadcast_buffers: True (DDP's default): replica 0's buffers (BatchNorm running statistics) are
            broadcast to every replica after each synchronising backward; False leaves each replica its own.

    Raises:
        DeviceError: bad device names (these are never "fallen back" from).
        StrategyStartError: multi-device start failed and ``fallback="error"``.
        ClusterConfigError: an incomplete or inconsistent launcher environment.
    """

    def __init__(self, devices=None, *, num_replicas: int | None = None, fallback: str = "one_device",
                 timeout: float = 1800.0, backend: str | None = None, bucket_cap_mb: float = 25.0,
                 gradient_compression: str | None = None, broadcast_buffers: bool = True):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback={fallback!r}; expected one of {FALLBACKS}.")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout={timeout!r}; expected a positive number of seconds.")
        self.fallback_reason: str | None = None
        self._replicas: ScriptReplicas | None = None
        spec = from_torchrun_env()
        if spec is not None:
            wanted = len(resolve_replica_devices(num_replicas, devices)) if (num_replicas or devices) else None
            check_second(type(self).__name__, wanted, joins_group=True)
            group = self._join_launched(spec, timeout, backend)
        elif dist.is_initialized():
            wanted = len(resolve_replica_devices(num_replicas, devices)) if (num_replicas or devices) else None
            check_second(type(self).__name__, wanted, joins_group=True)
            if wanted is not None and wanted != dist.get_world_size():
                raise StrategyStartError(
                    f"{type(self).__name__} asks for {wanted} replicas, but this process already belongs to a process "
                    f"group of {dist.get_world_size()} (torch.distributed.init_process_group was called). Fix: leave "
                    "devices/num_replicas out to join it, or destroy_process_group() first.")
            group = ReplicaGroup.join(None, _device_for(int(os.environ.get("LOCAL_RANK", dist.get_rank())), None),
                                      timeout, from_env=True)
        else:
            resolved = resolve_replica_devices(num_replicas, devices)
            check_second(type(self).__name__, len(resolved), joins_group=False)
            group = self._start(resolved, timeout, backend, fallback)
        _share_cpu_threads(group)
        super().__init__(group, check_mirrored=True, bucket_cap_mb=bucket_cap_mb,
                         gradient_compression=gradient_compression)
        self.broadcast_buffers = broadcast_buffers

    def _join_launched(self, spec: ClusterSpec, timeout: float, backend: str | None) -> ReplicaGroup:
        devices, error_dir, launched_timeout = launched_settings()
        install_replica_excepthook(spec.rank, error_dir)
        device = _device_for(spec.local_rank, devices)
        return ReplicaGroup.join(spec, device, launched_timeout or timeout, from_env=True, backend=backend)

    def _start(self, devices: list[Device], timeout: float, backend: str | None, fallback: str,
               placement: ClusterSpec | None = None) -> ReplicaGroup:
        """Start this machine's replicas. ``placement`` is this worker's first replica in a multi-worker job
        (global rank, world size, rendezvous address); None for a job on this machine alone."""
        try:
            missing = [d for d in devices if d.is_cuda and d.index >= cuda_device_count()]
            if missing:
                count = cuda_device_count()
                raise RuntimeError(f"{', '.join(map(str, missing))} not available: "
                                   + (why_no_gpu() if count == 0 else f"only {count} GPUs are visible"))
            if len(devices) == 1 and placement is None:
                return ReplicaGroup.single(devices[0].torch_device())
            if placement is None:
                placement = ClusterSpec(0, len(devices), 0, len(devices), "127.0.0.1", 0, "allgpu")
            self._replicas = ScriptReplicas(devices, timeout, rank_offset=placement.rank,
                                            world_size=placement.world_size, master_addr=placement.master_addr,
                                            master_port=placement.master_port or None)
            self._replicas.start()
            spec = ClusterSpec(placement.rank, placement.world_size, 0, len(devices), placement.master_addr,
                               self._replicas.port, placement.source)
            return ReplicaGroup.join(spec, devices[0].torch_device(), timeout, from_env=False, backend=backend)
        except Exception as exc:  # driver, NCCL, rendezvous: every start failure is handled the same way
            reason = str(exc).rstrip(". ")
            if self._replicas is not None:
                self._replicas.stop()
                self._replicas = None
            if dist.is_initialized():
                dist.destroy_process_group()
            names = [str(d) for d in devices]
            if fallback == "error":
                raise StrategyStartError(
                    f"{type(self).__name__} could not start on {names}: {reason}. Fix: run `allgpu doctor`, or pass "
                    "fallback='one_device' to continue on one device."
                ) from exc
            one = Device("cuda", 0) if cuda_device_count() else Device("cpu", 0)
            self.fallback_reason = reason
            warnings.warn(
                f"{type(self).__name__} could not start on {names}: {reason}. Continuing on one device ({one}) because "
                "fallback='one_device'; pass fallback='error' to stop instead.",
                RuntimeWarning,
                stacklevel=3,
            )
            return ReplicaGroup.single(one.torch_device())


def _device_for(local_rank: int, devices: list[Device] | None) -> torch.device:
    if devices:
        return devices[local_rank % len(devices)].torch_device()
    if os.environ.get("ALLGPU_DEVICE") == "cpu" or cuda_device_count() == 0:
        return torch.device("cpu")
    return torch.device("cuda", local_rank % cuda_device_count())


def _share_cpu_threads(group: ReplicaGroup) -> None:
    # N CPU replicas each with a full intra-op pool oversubscribe the cores and run slower than one.
    if group.device.type == "cpu" and group.world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // group.world_size))
