"""``MirroredStrategy``: synchronous data parallelism, one replica per device (``tf.distribute.MirroredStrategy``).

The constructor validates its arguments, then :func:`allgpu.runtime.placement.place_replicas` starts or joins
the job (torchrun / ``allgpu run`` / ``allgpu.launch``, an existing process group, or a launch-free re-execution
of the script once per extra device) and returns a :class:`~allgpu.runtime.placement.Placement`. If multi-device
start fails, ``fallback="one_device"`` continues on one device with a warning saying why; ``fallback="error"``
raises.
"""

from __future__ import annotations

from allgpu.runtime.placement import place_replicas, validate_fallback, validate_timeout
from allgpu.strategies.base.checks import validate_sync_options
from allgpu.strategies.base.strategy import Strategy


class MirroredStrategy(Strategy):
    """One replica per device; parameters mirrored; gradients all-reduced during backward.

    Args:
        devices: device names (``["/gpu:0", "/gpu:1"]``, ``["/cpu:0", "/cpu:1"]`` for CPU replicas on Gloo);
            None for every visible GPU (one CPU replica when there is none).
        num_replicas: instead of ``devices``: the first N GPUs, or N CPU replicas on a machine without GPUs.
        fallback: ``"one_device"`` (default) or ``"error"``, when multi-device start fails.
        timeout: collective timeout in seconds (default 1800, or the ``timeout`` given to ``allgpu.launch``);
            a replica that does not arrive in time is named in the error.
        backend: process-group backend; default NCCL on CUDA, Gloo on CPU.
        bucket_cap_mb: gradient bucket size in MiB.
        gradient_compression: None, ``"bf16"`` or ``"fp16"``: send float32 gradients in 16 bits (half the
            bytes; for communication-bound jobs, as the step monitor suggests).

    Raises:
        DeviceError: bad device names (these are never "fallen back" from).
        ValueError: a bad ``fallback``, ``timeout``, ``bucket_cap_mb`` or ``gradient_compression`` (before any
            replica is started).
        StrategyStartError: multi-device start failed and ``fallback="error"``.
        ClusterConfigError: an incomplete or inconsistent launcher environment.
    """

    multi_worker = False  # TF_CONFIG describes multi-worker strategies' jobs; MirroredStrategy is one machine's
    starts_replicas = True  # a second strategy in the process must agree with this one's count (allgpu.runtime.live)

    def __init__(self, devices=None, *, num_replicas: int | None = None, fallback: str = "one_device",
                 timeout: float | None = None, backend: str | None = None, bucket_cap_mb: float = 25.0,
                 gradient_compression: str | None = None, broadcast_buffers: bool = True):
        validate_fallback(fallback)
        validate_timeout(timeout)
        validate_sync_options(bucket_cap_mb, gradient_compression)
        placement = place_replicas(type(self).__name__, devices, num_replicas, timeout=timeout, backend=backend,
                                   fallback=fallback, cluster=self._cluster(),
                                   multi_worker=self.multi_worker)
        super().__init__(placement, check_mirrored=True, bucket_cap_mb=bucket_cap_mb,
                         gradient_compression=gradient_compression)
        self.broadcast_buffers = broadcast_buffers

    def _cluster(self):
        """The job a cluster resolver described; None: discover it from the environment."""
        return None
