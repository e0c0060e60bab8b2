"""The step monitor on real Gloo CPU replicas with planted causes: each is diagnosed, a healthy run is not.

Each step's compute is a small model's forward and backward plus 20 ms of sleep standing for device work (as on
a GPU, the host waits without using a core). Real CPU-bound compute would make the verdicts depend on how the
two replica processes share the test machine's cores with whatever else runs there.
"""

import json
import time

import pytest
import torch
from torch.utils.data import Dataset

import allgpu
from allgpu.monitor import StepMonitor

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


class SleepyDataset(Dataset):
    """A dataset whose __getitem__ takes 4 ms, as slow decoding would."""

    def __len__(self):
        return 512

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((16,), float(i % 7)), torch.tensor(i % 3)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))


DEVICE_WORK_S = 0.02


def _batches(steps):
    return [(torch.randn(8, 16), torch.randint(0, 3, (8,))) for _ in range(steps)]


def _train(cause: str, steps: int = 6, epochs: int = 1, report_dir: str | None = None):
    strategy = allgpu.MirroredStrategy(timeout=60)
    with strategy.scope():
        model = _mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if cause == "input":
        data = strategy.distribute_dataset(SleepyDataset(), 16, num_workers=0)
    else:
        data = strategy.distribute_datasets_from_function(lambda ctx: _batches(steps + 1))
    monitor = StepMonitor(strategy, num_workers=getattr(data, "num_workers", None))
    reports = []
    for epoch in range(epochs):
        monitor.start_epoch(epoch)
        it = iter(data)
        for _ in range(steps + (1 if epoch == 0 else 0)):  # + the warm-up step the monitor leaves out
            monitor.start_step()
            with monitor.phase("input"):
                x, y = next(it)
            with monitor.phase("compute"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                time.sleep(DEVICE_WORK_S)
                if cause == "straggler" and strategy.replica_id_in_sync == 1:
                    time.sleep(0.03)  # replica 1 is slow at every step
                loss.backward()
            monitor.add("comm", strategy.gradient_sync.wait_s)
            with monitor.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            monitor.end_step(samples=len(y))
        reports.append(monitor.end_epoch())
    paths = monitor.write_report(report_dir) if report_dir else []
    monitor.close()
    return [r.to_dict() for r in reports], [str(p) for p in paths]


def _findings(results):
    (reports0, _), (reports1, _) = results
    assert reports0 == reports1  # one gather: every replica holds the same report
    return [(f["id"], f["replica"]) for f in reports0[-1]["diagnosis"]], reports0[-1]


@pytest.mark.timeout(60)
def test_a_sleeping_dataset_is_input_bound():
    findings, report = _findings(allgpu.launch(_train, num_replicas=2, args=("input",)))
    assert findings == [("input-bound", None)], findings
    assert all(r["phase_s"]["input"] / r["step_s"] > 0.2 for r in report["replicas"])
    assert "num_workers=0 now" in report["diagnosis"][0]["fix"]


@pytest.mark.timeout(60)
def test_replica_one_sleeping_in_compute_is_the_straggler():
    findings, report = _findings(allgpu.launch(_train, num_replicas=2, args=("straggler",)))
    assert findings == [("straggler", 1)], findings
    zero, one = report["replicas"]
    assert one["phase_s"]["compute"] > 0.05 * 6 and zero["phase_s"]["comm"] > 0.02 * 6  # replica 0 waits for it


@pytest.mark.timeout(60)
def test_a_healthy_run_raises_no_alarm_and_writes_the_report(tmp_path):
    results = allgpu.launch(_train, num_replicas=2, args=("healthy", 6, 2, str(tmp_path)))
    findings, report = _findings(results)
    assert findings == [], report
    assert [r["steps"] for r in report["replicas"]] == [6, 6] and report["replicas"][0]["samples"] == 6 * 8
    assert results[1][1] == []  # only replica 0 writes
    json_path, png_path = map(str, results[0][1])
    data = json.loads(open(json_path).read())
    assert [e["epoch"] for e in data["epochs"]] == [0, 1]
    assert {r["replica"] for r in data["epochs"][0]["replicas"]} == {0, 1}
    assert open(png_path, "rb").read(4) == b"\x89PNG"
