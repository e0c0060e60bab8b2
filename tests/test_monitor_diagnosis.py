"""Diagnosis rules on constructed figures, the report, and the monitor's bookkeeping on one CPU replica."""

import json
import time

import pytest
from rich.console import Console

import allgpu
from allgpu.monitor import EpochReport, ReplicaFigures, StepMonitor, Thresholds, diagnose, write_run_report
from allgpu.monitor.clock import WallClock
from allgpu.monitor.gpu import GpuSampler


def fig(replica=0, *, input=0.0, compute=0.9, comm=0.05, optimizer=0.05, other=0.0, steps=10, samples=320,
        host="node-a", visible_gpus=0, cuda_index=None, num_workers=None):
    return ReplicaFigures(replica, host, f"cuda:{cuda_index}" if cuda_index is not None else "cpu", steps, samples,
                          {"input": input, "compute": compute, "comm": comm, "optimizer": optimizer, "other": other},
                          visible_gpus=visible_gpus, cuda_index=cuda_index, num_workers=num_workers)


def ids(findings):
    return [(f.id, f.replica) for f in findings]


def test_a_healthy_job_has_no_finding():
    figures = [fig(r, visible_gpus=4, cuda_index=r, input=0.05, comm=0.1, other=0.05) for r in range(4)]
    assert diagnose(figures) == []


def test_input_bound_on_every_replica_names_num_workers():
    findings = diagnose([fig(0, input=0.5, compute=0.4, num_workers=0), fig(1, input=0.4, compute=0.5, num_workers=0)])
    assert ids(findings) == [("input-bound", None)]
    assert "replica 0 50%, replica 1 40%" in findings[0].message
    assert "num_workers=0 now" in findings[0].fix and "pin_memory" in findings[0].fix


def test_input_bound_on_one_replica_names_it_and_threshold_is_strict():
    findings = diagnose([fig(0, input=0.2), fig(1, input=0.5)])  # 0.2 / 1.2 = 17%: under 20%
    assert ids(findings) == [("input-bound", 1)]
    assert "num_workers is unknown" in findings[0].fix
    assert diagnose([fig(0, input=0.25, compute=0.7)], Thresholds(input=0.3)) == []


def test_communication_bound_uses_the_replica_that_waits_least():
    findings = diagnose([fig(0, comm=0.4, compute=0.6), fig(1, comm=0.35, compute=0.6)])
    assert ids(findings) == [("communication-bound", None)]
    assert "replica 1" in findings[0].message
    assert "accumulation" in findings[0].fix and "bf16" in findings[0].fix and "now 32 examples" in findings[0].fix
    # The fast replica waiting for a slow one is a straggler, not communication.
    straggling = diagnose([fig(0, comm=0.6, compute=0.3), fig(1, comm=0.02, compute=0.9)])
    assert ids(straggling) == [("straggler", 1)]
    assert diagnose([fig(0, comm=0.9, compute=0.1)]) == []  # one replica has nothing to all-reduce with


def test_straggler_is_named_against_the_median():
    figures = [fig(r, compute=0.9) for r in range(3)] + [fig(3, compute=1.2)]
    findings = diagnose(figures)
    assert ids(findings) == [("straggler", 3)]
    assert "replica 3 (cpu on node-a) computes 120.0 ms a step, 1.33x the median 90.0 ms" in findings[0].message
    assert "replica 3" in findings[0].fix
    assert diagnose([fig(0, compute=0.9), fig(1, compute=1.0)]) == []  # 1.05x the median


def test_a_burst_of_load_on_a_few_steps_is_not_a_straggler():
    burst = fig(1, compute=1.8)  # mean 180 ms a step, from a few slow steps
    burst.step_compute_median_s = 0.092
    assert diagnose([fig(0, compute=0.9), burst]) == []
    burst.step_compute_median_s = 0.17
    assert ids(diagnose([fig(0, compute=0.9), burst])) == [("straggler", 1)]


def test_straggler_ignores_differences_below_timer_noise():
    tiny = dict(comm=0.0, optimizer=0.0, steps=10)  # 0.01 ms vs 0.09 ms a step
    assert diagnose([fig(0, compute=0.0001, **tiny), fig(1, compute=0.0009, **tiny)]) == []


def test_host_bound():
    findings = diagnose([fig(0, other=0.8), fig(1, other=0.7)])
    assert ids(findings) == [("host-bound", None)]
    assert "torch.compile" in findings[0].fix and "larger per-replica batch" in findings[0].fix


def test_one_replica_on_a_four_gpu_machine_leaves_three_idle():
    findings = diagnose([fig(0, visible_gpus=4, cuda_index=0)])
    assert ids(findings) == [("idle-device", None)]
    assert findings[0].severity == "error"
    assert "4 GPUs are visible but only 1 have a replica" in findings[0].message
    assert "cuda:1, cuda:2, cuda:3 do no work" in findings[0].message
    assert "MirroredStrategy() with no devices=" in findings[0].fix and "--nproc-per-node auto" in findings[0].fix


def test_idle_devices_are_counted_per_host():
    figures = [fig(0, host="a", visible_gpus=2, cuda_index=0), fig(1, host="a", visible_gpus=2, cuda_index=1),
               fig(2, host="b", visible_gpus=2, cuda_index=0)]
    findings = diagnose(figures)
    assert ids(findings) == [("idle-device", None)] and findings[0].message.startswith("b: 2 GPUs")
    assert diagnose([fig(0, visible_gpus=0)]) == []  # a CPU machine has no idle GPU


def test_replicas_without_steps_are_ignored():
    assert diagnose([fig(0, steps=0, compute=0.0, comm=0.0, optimizer=0.0)]) == []


def test_figures_derive_utilisation_and_throughput():
    f = fig(input=0.1, compute=0.6, comm=0.1, optimizer=0.2, samples=100)
    assert f.step_s == pytest.approx(1.0) and f.samples_per_s == pytest.approx(100)
    assert f.busy_pct == pytest.approx(80) and f.utilisation_pct == pytest.approx(80)
    f.gpu_util_pct = 97.0
    assert f.utilisation_pct == 97.0
    assert ReplicaFigures.from_dict(f.to_dict()) == f


def test_report_table_json_and_plot(tmp_path):
    reports = [EpochReport(e, [fig(0, input=0.6), fig(1, input=0.5)]) for e in range(3)]
    for r in reports:
        r.diagnosis = diagnose(r.replicas)
    console = Console(width=120, record=True)
    reports[0].print(console)
    text = console.export_text()
    assert "util%" in text and "samples/s" in text and "input-bound" in text and "Fix:" in text
    paths = write_run_report(reports, tmp_path / "out")
    data = json.loads(paths[0].read_text())
    assert [e["epoch"] for e in data["epochs"]] == [0, 1, 2]
    assert data["epochs"][0]["diagnosis"][0]["id"] == "input-bound"
    assert EpochReport.from_dict(data["epochs"][1]).replicas[1].phase_s["input"] == 0.5
    assert paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].stat().st_size > 5000
    with pytest.raises(ValueError, match="no epoch to report"):
        write_run_report([], tmp_path)


def test_healthy_report_says_so():
    assert "no problem found" in EpochReport(0, [fig()]).findings_text()


# -- the monitor itself, one CPU replica, a host clock the test advances -------------------------------------------
class TickClock(WallClock):
    """The host clock's interface, read from ``now``, which the test advances: exact phase times on any load
    (``time.sleep`` overran by more than 50% on a machine shared with 8 busy processes)."""

    def __init__(self):
        self.now = 0.0

    def mark(self) -> float:
        return self.now


def _monitor(**options):
    monitor = StepMonitor(allgpu.OneDeviceStrategy("/cpu:0"), **options)
    monitor._clock = TickClock()  # the edge faked: the clock reading
    return monitor


def _step(monitor, input_s=0.0, compute_s=0.0, comm_s=0.0, optimizer_s=0.0, other_s=0.0, samples=8):
    clock = monitor._clock
    monitor.start_step()
    with monitor.phase("input"):
        clock.now += input_s
    with monitor.phase("compute"):
        clock.now += compute_s
    monitor.add("comm", comm_s)
    with monitor.phase("optimizer"):
        clock.now += optimizer_s
    clock.now += other_s
    monitor.end_step(samples=samples)


def test_monitor_splits_step_time_by_phase():
    monitor = _monitor(warmup_steps=1)
    monitor.start_epoch(3)
    _step(monitor, compute_s=0.2)  # warm-up: left out
    for _ in range(3):
        _step(monitor, input_s=0.02, compute_s=0.04, comm_s=0.01, optimizer_s=0.01, other_s=0.02)
    report = monitor.end_epoch()
    (f,) = report.replicas
    assert report.epoch == 3 and f.steps == 3 and f.samples == 24 and f.timing == "wall"
    want = {"input": 0.06, "compute": 0.09, "comm": 0.03, "optimizer": 0.03, "other": 0.06}
    for phase, seconds in want.items():  # compute is what the phase took less the comm inside it
        assert f.phase_s[phase] == pytest.approx(seconds, abs=1e-9), (phase, f.phase_s[phase])
    assert ("host-bound", None) not in ids(report.diagnosis)  # other is 22%
    assert ids(report.diagnosis) == [("input-bound", None)] or ids(report.diagnosis) == [("input-bound", 0)]
    assert monitor.reports == [report]


def test_comm_is_never_more_than_the_compute_it_came_from():
    monitor = _monitor(warmup_steps=0)
    monitor.start_epoch(0)
    _step(monitor, compute_s=0.01, comm_s=5.0)
    f = monitor.end_epoch().replicas[0]
    assert f.phase_s["compute"] == 0.0 and f.phase_s["comm"] == pytest.approx(0.01, abs=0.005)


def test_misuse_is_explained():
    monitor = StepMonitor(allgpu.OneDeviceStrategy("/cpu:0"))
    with pytest.raises(ValueError, match="expected one of \\('input', 'compute', 'optimizer'\\)"):
        monitor.phase("forward")
    with pytest.raises(RuntimeError, match="call monitor.start_step\\(\\) first"):
        with monitor.phase("input"):
            pass
    with pytest.raises(RuntimeError, match="without start_step"):
        monitor.end_step()
    monitor.start_step()
    with pytest.raises(RuntimeError, match="phases do not nest"):
        with monitor.phase("compute"):
            with monitor.phase("input"):
                pass
    monitor._open = None
    with pytest.raises(ValueError, match="finite number of seconds"):
        monitor.add("comm", -1.0)
    with pytest.raises(RuntimeError, match="twice without end_step"):
        monitor.start_step()
    with pytest.raises(RuntimeError, match="call monitor.end_step\\(\\) before end_epoch"):
        monitor.end_epoch()
    with pytest.raises(ValueError, match="warmup_steps"):
        StepMonitor(allgpu.OneDeviceStrategy("/cpu:0"), warmup_steps=-1)


def test_a_disabled_monitor_does_nothing():
    monitor = _monitor(enabled=False)
    monitor.start_epoch(0)
    _step(monitor)
    assert monitor.end_epoch() is None and monitor.write_report("unused") == []


def _until(condition, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_gpu_sampler_averages_utilisation_and_keeps_peak_memory():
    readings = iter([(50.0, 100.0), (70.0, 300.0), (90.0, 200.0)] + [(0.0, 0.0)] * 100000)
    calls = []

    def read():
        calls.append(1)
        return next(readings)

    sampler = GpuSampler(read, interval_s=0.01)
    _until(lambda: len(calls) >= 2)  # the sampling thread may start late on a loaded machine
    sampler.close()
    util, peak = sampler.take()
    assert util is not None and peak is not None and peak <= 300.0
    assert sampler.take() == (None, None)


def test_gpu_sampler_stops_on_a_failing_reader():
    def broken():
        raise RuntimeError("GPU fell off the bus")

    sampler = GpuSampler(broken, interval_s=0.01)
    _until(lambda: sampler.error)
    assert "fell off the bus" in sampler.error and sampler.take() == (None, None)
    sampler.close()


def test_no_gpu_sampler_on_cpu():
    assert StepMonitor(allgpu.OneDeviceStrategy("/cpu:0"), sample_gpu=True)._sampler is None


def test_add_sync_wait_counts_each_all_reduce_round_once():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    sync = strategy.gradient_sync
    monitor = StepMonitor(strategy, warmup_steps=0)
    monitor.start_epoch(0)
    for rounds, wait_s in [(0, 0.0), (1, 0.01), (1, 0.01), (2, 0.02)]:  # the middle micro-step had no all-reduce
        sync.rounds, sync.wait_s = rounds, wait_s
        monitor.start_step()
        with monitor.phase("compute"):
            time.sleep(0.03)
        monitor.add_sync_wait(sync)
        monitor.end_step(samples=1)
    assert monitor.end_epoch().replicas[0].phase_s["comm"] == pytest.approx(0.03, abs=1e-6)


def test_communication_bound_reads_the_typical_step():
    burst = [fig(r, comm=0.4, compute=0.6) for r in range(2)]  # 40% of the total, from a few slow all-reduces
    for f in burst:
        f.step_comm_median_s, f.step_median_s = 0.005, 0.1
    assert diagnose(burst) == []
    for f in burst:
        f.step_comm_median_s = 0.03
    assert ids(diagnose(burst)) == [("communication-bound", None)]
    assert "30% of a typical step" in diagnose(burst)[0].message
