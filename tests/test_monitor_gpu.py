"""The monitor on a CUDA device: phases on the device's timeline (CUDA events), no stall per step, NVML readings.

Skipped without a GPU; run with ``pytest -m gpu tests/test_monitor_gpu.py`` on a GPU machine.
"""

import time

import pytest
import torch

import allgpu
from allgpu.monitor import StepMonitor

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _cycles_for(seconds: float) -> int:
    """GPU clock cycles that ``torch.cuda._sleep`` spins for about ``seconds``, calibrated once."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return int(10_000_000 * seconds / (start.elapsed_time(end) / 1000))


@pytest.mark.timeout(120)
def test_compute_is_timed_on_the_device_without_stalling_the_host():
    strategy = allgpu.OneDeviceStrategy("cuda:0")
    cycles = _cycles_for(0.02)
    monitor = StepMonitor(strategy, sample_gpu=True, warmup_steps=0)
    # Independent reference: events around the whole loop, on the same stream (the GPU clock may change
    # between a calibration and the loop, so absolute sleep lengths are not asserted).
    ref_start, ref_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ref_start.record()
    monitor.start_epoch(0)
    host_start = time.perf_counter()
    for _ in range(10):
        monitor.start_step()
        with monitor.phase("input"):
            pass
        with monitor.phase("compute"):
            torch.cuda._sleep(cycles)  # 20 ms on the device, microseconds on the host
        with monitor.phase("optimizer"):
            torch.cuda._sleep(cycles // 4)
        monitor.end_step(samples=4)
    host_s = time.perf_counter() - host_start
    ref_end.record()
    report = monitor.end_epoch()
    device_s = ref_start.elapsed_time(ref_end) / 1000
    monitor.close()
    (f,) = report.replicas
    assert f.timing == "cuda-events" and f.steps == 10 and f.cuda_index == 0
    assert f.phase_s["compute"] + f.phase_s["optimizer"] == pytest.approx(device_s, rel=0.1)
    assert f.phase_s["compute"] / f.phase_s["optimizer"] == pytest.approx(4.0, rel=0.2)
    assert host_s < 0.5 * f.step_s  # the host queued ahead: the monitor never waited for the device per step
    assert report.diagnosis == [] or all(x.id == "idle-device" for x in report.diagnosis)


@pytest.mark.timeout(120)
def test_nvml_readings_where_nvml_exists():
    pytest.importorskip("pynvml")
    strategy = allgpu.OneDeviceStrategy("cuda:0")
    monitor = StepMonitor(strategy, sample_gpu=True, warmup_steps=0)
    if monitor._sampler is None:
        pytest.skip("NVML did not initialise on this machine")
    cycles = _cycles_for(0.05)
    monitor.start_epoch(0)
    for _ in range(20):  # 1 s of device work, several sampler periods
        monitor.start_step()
        with monitor.phase("compute"):
            torch.cuda._sleep(cycles)
        monitor.end_step(samples=1)
    f = monitor.end_epoch().replicas[0]
    monitor.close()
    assert f.gpu_util_pct is not None and f.gpu_util_pct > 30
    assert f.gpu_mem_mib is not None and f.gpu_mem_mib > 0
