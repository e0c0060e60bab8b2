"""Clocks for phase boundaries: the host's clock on CPU, CUDA events on the device's timeline on GPU.

On CUDA the host runs ahead of the device, so a host timer around ``loss.backward()`` measures kernel launches,
not kernels. Rather than synchronising at every phase boundary (which would stall the queue and cost more than
the 2% budget), :class:`CudaEventClock` records an event on the current stream at each boundary (a few
microseconds) and reads the elapsed times later, once the device has passed them: a step is resolved when its
last event has completed (``Event.query()``, never blocking), and at the end of an epoch the clock waits for the
rest. Time between two events is device time: a gap in which the device idles waiting for the host (for input,
say) counts in the phase that made it wait. Follows ``torch.cuda.Event(enable_timing=True)`` and the CUDA
Programming Guide's "Events" section.
"""

from __future__ import annotations

import time

import torch


class WallClock:
    """Host time, ``time.perf_counter`` (seconds); every mark is ready at once."""

    kind = "wall"

    def mark(self) -> float:
        return time.perf_counter()

    def ready(self, mark: float) -> bool:
        return True

    def wait(self, mark: float) -> None:
        pass

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def release(self, mark: float) -> None:
        pass


class CudaEventClock:
    """Device time on ``device``'s current stream, from timing events kept in a pool (so marks allocate nothing)."""

    kind = "cuda-events"

    def __init__(self, device: torch.device):
        self.device = device
        self._pool: list[torch.cuda.Event] = []

    def mark(self) -> torch.cuda.Event:
        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def ready(self, mark: torch.cuda.Event) -> bool:
        return mark.query()

    def wait(self, mark: torch.cuda.Event) -> None:
        mark.synchronize()

    def seconds(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds

    def release(self, mark: torch.cuda.Event) -> None:
        self._pool.append(mark)


def clock_for(device: torch.device):
    """CUDA events on a CUDA device, the host clock elsewhere."""
    return CudaEventClock(device) if device.type == "cuda" else WallClock()
