"""GPU utilisation and memory sampled through NVML (``nvidia-ml-py``) on a background thread.

``nvmlDeviceGetUtilizationRates().gpu`` is the percentage of the driver's last sample period (1/6 s to 1 s)
in which a kernel ran; ``nvmlDeviceGetMemoryInfo().used`` is the memory in use on the device by every process.
Only :func:`nvml_reader` touches NVML; :class:`GpuSampler` takes any reader, so it is tested with a fake one.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import torch

from allgpu.devices import nvml_selector

Reader = Callable[[], tuple[float, float]]  # () -> (utilisation %, memory used MiB)


def nvml_reader(device: torch.device) -> Reader | None:
    """A reader for the physical GPU behind visible ``device``; None where NVML or the GPU is missing."""
    if device.type != "cuda":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = _handle(pynvml, device.index if device.index is not None else torch.cuda.current_device())
    except Exception:  # no driver, no library, a MIG slice NVML will not report on: run without GPU readings
        return None

    def read() -> tuple[float, float]:
        util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
        return float(util), float(used)

    read()  # fail here, not on the sampler thread
    return read


def _handle(pynvml, visible_index: int):
    # NVML counts physical GPUs; PyTorch counts visible ones. The UUID names the same GPU in both.
    try:
        uuid = str(torch.cuda.get_device_properties(visible_index).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    except Exception:  # torch too old to report a UUID: predict the GPU from CUDA_VISIBLE_DEVICES
        key = nvml_selector(visible_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if isinstance(key, str):
            return pynvml.nvmlDeviceGetHandleByUUID(key)
        return pynvml.nvmlDeviceGetHandleByIndex(key)


class GpuSampler:
    """Calls ``reader`` every ``interval_s`` seconds on a daemon thread; :meth:`take` returns the period's figures.

    Args:
        reader: ``() -> (utilisation %, memory used MiB)``; an exception stops sampling (figures become None).
        interval_s: seconds between samples.
    """

    def __init__(self, reader: Reader, interval_s: float = 0.2):
        self._reader = reader
        self._interval = interval_s
        self._lock = threading.Lock()
        self._util: list[float] = []
        self._peak_mib: float | None = None
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._loop, name="allgpu-gpu-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                util, mib = self._reader()
            except Exception as exc:  # a GPU that fell off the bus: stop sampling, keep training
                self.error = f"{type(exc).__name__}: {exc}"
                return
            with self._lock:
                self._util.append(util)
                self._peak_mib = mib if self._peak_mib is None else max(self._peak_mib, mib)

    def take(self) -> tuple[float | None, float | None]:
        """(mean utilisation %, peak memory MiB) since the last call; (None, None) with no sample."""
        with self._lock:
            util, peak = self._util, self._peak_mib
            self._util, self._peak_mib = [], None
        return (sum(util) / len(util) if util else None), peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._interval + 1)
