"""`allgpu doctor --run` with real NVML samples on a GPU machine (`pytest -m gpu`): a PyTorch script that leaves
the GPU idle and one that uses it. Skipped without a CUDA device (the CPU-only CI machine)."""

from __future__ import annotations

import io

import pytest
import torch

from allgpu.doctor.run_any import diagnose_run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

IDLE = """
import time, torch
x = torch.randn(512, 512)
end = time.time() + 4
while time.time() < end:
    x = torch.tanh(x @ x.T / 512)  # CPU only: the GPU stays idle
print("cpu work done", torch.cuda.is_available())
"""

BUSY = """
import time, torch
x = torch.randn(4096, 4096, device="cuda:0")
end = time.time() + 6
while time.time() < end:
    x = torch.tanh(x @ x.T / 4096)
torch.cuda.synchronize()
print("gpu work done")
"""


def run(tmp_path, source):
    script = tmp_path / "job.py"
    script.write_text(source)
    return diagnose_run(str(script), [], echo=io.StringIO(), interval_s=0.2)


def test_a_script_that_leaves_the_gpu_idle(tmp_path):
    verdict, code, out = run(tmp_path, IDLE)
    assert code == 0 and "cpu work done" in "".join(out)
    assert verdict.present >= 1 and verdict.used == 0
    assert any("never used a GPU" in n for n in verdict.notes)


def test_a_script_that_uses_one_gpu(tmp_path):
    verdict, code, out = run(tmp_path, BUSY)
    assert code == 0 and "gpu work done" in "".join(out)
    assert verdict.used == 1
    if verdict.present == 1:
        assert verdict.cause_ids == ("multi-gpu-ok",)
    else:
        assert verdict.cause_ids[0] == "single-device-strategy"
