"""`allgpu doctor --run` for scripts that do not use allgpu: a real TensorFlow 2.21 script (tensorflow-cpu: its
log shows no GPU here), plain PyTorch scripts with fake NVML samples at the edge, lint evidence, timeouts."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from allgpu.doctor.frameworks import installed_packages
from allgpu.doctor.gpu_samples import GpuSample
from allgpu.doctor.reading import EnvironmentReading
from allgpu.doctor.run_any import diagnose_run, is_allgpu_script

pytestmark = pytest.mark.replicas  # runs scripts as child processes (see tests/conftest.py)

READINGS = Path(__file__).parent / "doctor_readings"

TF_MIRRORED = """
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))
x = np.random.rand(64, 4).astype("float32")
y = (x.sum(axis=1) > 2).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(x, y, batch_size=16 * strategy.num_replicas_in_sync, epochs=1, verbose=2)
print("tf script finished")
"""

TORCH_LOOP = """
import time
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
time.sleep(1.5)  # long enough for several GPU samples
print(f"torch loop finished, loss={loss.item():.3f}")
"""

# The same loop defined but not run at import: the verdict tests below fake the GPU samples, so the script only
# needs its source (for lint) and a short run, not a torch import in the child (seconds each on 2 cores).
TORCH_SOURCE_ONLY = """
import time


def train():
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    for x, y in loader:
        model(x).sum().backward()


if __name__ == "__main__":
    time.sleep(1.0)  # long enough for several GPU samples
    print("script finished")
"""


def env(name: str, gpus: int | None = None) -> EnvironmentReading:
    reading = EnvironmentReading.from_dict(json.loads((READINGS / f"{name}.json").read_text()))
    return reading if gpus is None else dataclasses.replace(reading, gpus=reading.gpus[:gpus], links=())


class FakeNvml:
    """Samples as NVML would give them: ``util[i]`` % busy, and GPUs in ``grows`` gaining the job's memory after the
    first sample (the way a job's allocations show up)."""

    def __init__(self, util: list[float], grows: set[int]):
        self.util, self.grows, self.calls = util, grows, 0

    def __call__(self) -> list[GpuSample]:
        self.calls += 1
        return [GpuSample(i, u,
                          500.0 + (4000.0 if i in self.grows and self.calls > 1 else 0.0))
                for i, u in enumerate(self.util)]


def run(tmp_path: Path, source: str, **kw):
    script = tmp_path / "train.py"
    script.write_text(source)
    echo = io.StringIO()
    verdict, code, lines = diagnose_run(str(script), [], echo=echo, interval_s=0.1, **kw)
    assert echo.getvalue() == "".join(lines)  # the output was shown as it came, and kept
    return verdict, code, "".join(lines)


@pytest.mark.skipif("tensorflow-cpu" not in installed_packages(), reason="tensorflow-cpu comes with `make install`")
@pytest.mark.timeout(300)
def test_real_tensorflow_script_on_a_machine_without_gpu(tmp_path):
    verdict, code, out = run(tmp_path, TF_MIRRORED, env=env("cpu_only"), sampler=None)
    assert code == 0 and "tf script finished" in out and "Number of devices: 1" in out
    assert verdict.present == 0
    assert verdict.cause_ids[:1] == ("no-driver",)
    assert "cpu-build" in verdict.cause_ids  # tensorflow-cpu: even with a GPU, TensorFlow could not use it
    cpu = next(p for p in verdict.findings if p.id == "cpu-build")
    assert any("tensorflow-cpu==" in e for e in cpu.evidence)
    assert any("The strategy runs 1 replica(s)" in n for n in verdict.notes)


def test_plain_pytorch_script_on_one_of_two_gpus_is_single_device(tmp_path):
    verdict, code, out = run(tmp_path, TORCH_LOOP, env=env("healthy_four_gpu", gpus=2),
                             sampler=FakeNvml([85.0, 0.0], grows={0}))
    assert code == 0 and "torch loop finished" in out
    assert (verdict.present, verdict.used) == (2, 1)
    assert verdict.cause_ids[0] == "single-device-strategy"
    assert "only GPU 0 held the job's memory" in verdict.findings[0].evidence[0]


def test_low_utilisation_names_input_bound_only_with_the_script_agreeing(tmp_path):
    # The DataLoader has no workers (lint PT005) and the GPU is busy 10%: input-bound, with both as evidence.
    verdict, _, _ = run(tmp_path, TORCH_SOURCE_ONLY, env=env("healthy_four_gpu", gpus=1), sampler=FakeNvml([10.0], {0}))
    assert verdict.cause_ids == ("input-bound",)
    evidence = verdict.findings[0].evidence
    assert any("busy 10%" in e for e in evidence) and any("PT005" in e for e in evidence)
    # Same samples, a script with nothing that points at input: GPU figures alone name no cause.
    quiet = TORCH_SOURCE_ONLY.replace("batch_size=8)", "batch_size=8, num_workers=2)")
    verdict, _, _ = run(tmp_path, quiet, env=env("healthy_four_gpu", gpus=1), sampler=FakeNvml([10.0], {0}))
    assert verdict.cause_ids == () and verdict.nothing_known
    assert any("mean 10% busy" in n for n in verdict.notes)


def test_every_gpu_busy_is_multi_gpu_ok(tmp_path):
    quiet = TORCH_SOURCE_ONLY.replace("batch_size=8)", "batch_size=8, num_workers=2)")
    verdict, _, _ = run(tmp_path, quiet, env=env("healthy_four_gpu", gpus=2), sampler=FakeNvml([90.0, 88.0], {0, 1}))
    assert verdict.cause_ids == ("multi-gpu-ok",) and verdict.used == 2


def test_a_script_that_never_touches_the_gpu_is_said_so_without_a_made_up_cause(tmp_path):
    quiet = TORCH_SOURCE_ONLY.replace("batch_size=8)", "batch_size=8, num_workers=2)")
    verdict, _, _ = run(tmp_path, quiet, env=env("healthy_four_gpu", gpus=2), sampler=FakeNvml([0.0, 0.0], set()))
    assert verdict.used == 0 and verdict.cause_ids == ()
    assert any("never used a GPU" in n for n in verdict.notes)


def test_timeout_stops_the_script_and_says_so(tmp_path):
    verdict, code, _ = run(tmp_path, "import time\nprint('start', flush=True)\ntime.sleep(60)\n",
                           env=env("cpu_only"), sampler=None, timeout=1)
    assert code != 0
    assert any("stopped after --timeout 1 s" in n for n in verdict.notes)


def test_allgpu_scripts_keep_the_step_monitor_path(tmp_path):
    (tmp_path / "a.py").write_text("import allgpu\n")
    (tmp_path / "b.py").write_text("from allgpu.strategies import MirroredStrategy\n")
    (tmp_path / "c.py").write_text("import torch  # allgpu is mentioned only here\n")
    (tmp_path / "d.py").write_text("import time, torch, allgpu\n")
    assert is_allgpu_script(str(tmp_path / "a.py")) and is_allgpu_script(str(tmp_path / "b.py"))
    assert is_allgpu_script(str(tmp_path / "d.py"))
    assert not is_allgpu_script(str(tmp_path / "c.py")) and not is_allgpu_script(str(tmp_path / "none.py"))


def test_cli_run_of_a_plain_script_json(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('hello from a plain script')\n")
    result = subprocess.run([sys.executable, "-m", "allgpu.cli.main", "doctor", "--json", "--report",
                             str(tmp_path / "out"), "--run", str(script)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    data = json.loads(result.stdout)
    assert "hello from a plain script" in result.stderr  # the script's output goes to stderr with --json
    assert data["script_exit_code"] == 0 and data["exit_code"] == result.returncode
    assert set(data["devices"]) == {"present", "registered", "used"}
    assert (tmp_path / "out" / "run.log").read_text() == "hello from a plain script\n"


def test_a_tensorflow_script_seeing_fewer_gpus_gets_the_framework_reading(tmp_path):
    """The script's log does not say why TensorFlow registered no GPU; the framework reading (a recorded one here,
    a child process in use) does: the GPUs are below the build's compute capability."""
    recorded = json.loads((READINGS / "frameworks" / "tf_gpu_too_old.json").read_text())
    from allgpu.doctor.frameworks import FrameworksReading

    source = "def train():\n    import tensorflow as tf\n\n\nprint('Number of devices: 1')\n"
    verdict, _, _ = run(tmp_path, source, env=EnvironmentReading.from_dict(recorded["reading"]), sampler=None,
                        frameworks_reader=lambda: FrameworksReading.from_dict(recorded["frameworks"]))
    assert "unsupported-compute-capability" in verdict.cause_ids
    finding = next(p for p in verdict.findings if p.id == "unsupported-compute-capability")
    assert any("Tesla M60" in e and "compute_capabilities" in e for e in finding.evidence)
