"""``OneDeviceStrategy``: everything on one device (``tf.distribute.OneDeviceStrategy``).

Useful to write code once against the strategy API and to compare a single replica with many.
"""

from __future__ import annotations

from allgpu.devices import cuda_device_count, parse_device, why_no_gpu
from allgpu.errors import DeviceError
from allgpu.runtime.lone_replica import warn_if_one_of_several
from allgpu.runtime.placement import Placement
from allgpu.strategies.base.strategy import Strategy


class OneDeviceStrategy(Strategy):
    """One replica on ``device``.

    Args:
        device: any accepted device name (``"/gpu:0"``, ``"cuda:1"``, ``"/cpu:0"``).

    Under a launcher that started several processes (``allgpu run``, torchrun, Slurm) each process is a job of
    one on ``device``: a ``RuntimeWarning`` says so (:mod:`allgpu.runtime.lone_replica`).

    Raises:
        DeviceError: a bad name, or a GPU that is not visible (the message says why none is).
    """

    def __init__(self, device="/cpu:0"):
        parsed = parse_device(device)
        if parsed.is_cuda and parsed.index >= cuda_device_count():
            count = cuda_device_count()
            reason = why_no_gpu() if count == 0 else f"only {count} GPUs are visible"
            raise DeviceError(f"OneDeviceStrategy({device!r}): that GPU is not available: {reason}")
        warn_if_one_of_several(f"OneDeviceStrategy({device!r})", str(parsed.torch_device()))
        super().__init__(Placement.single(parsed.torch_device()), check_mirrored=False)
