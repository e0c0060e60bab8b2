"""`allgpu doctor`: text, --json, --reading and exit codes, run for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from allgpu.cli.main import main

READINGS = Path(__file__).parent / "doctor_readings"
EXPECTED_EXIT = {"cpu_only": 0, "four_gpu_cvd0": 0, "healthy_four_gpu": 0, "gpu_busy": 0, "one_gpu": 0,
                 "mig_enabled": 0, "cpu_build_on_gpu": 1, "driver_too_old": 1, "nccl_missing": 1, "cvd_malformed": 1,
                 "h100_real": 0, "h100_busy_real": 0, "h100_cvd_duplicate_real": 1}


@pytest.mark.replicas
def test_this_machine_text(capsys):
    code = main(["doctor", "--no-frameworks"])  # with frameworks: test_doctor_frameworks
    out = capsys.readouterr().out
    assert "allgpu doctor: environment" in out and "PyTorch" in out and "DataLoader num_workers=" in out
    if "No GPU is visible" in out:  # the CPU-only CI machine
        assert "CPU build" in out and code == 0


@pytest.mark.replicas
def test_this_machine_json(capsys):
    code = main(["doctor", "--json", "--no-frameworks"])  # the TensorFlow child is tested in test_doctor_frameworks
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == code
    assert set(data) == {"reading", "visible_devices", "dataloader", "problems", "exit_code"}


@pytest.mark.parametrize("name, code", sorted(EXPECTED_EXIT.items()))
def test_recorded_reading_exit_codes(name, code, capsys):
    assert main(["doctor", "--reading", str(READINGS / f"{name}.json")]) == code
    out = capsys.readouterr().out
    assert ("exit code 1" in out) == (code == 1)


def test_reading_accepts_full_json_output(tmp_path, capsys):
    main(["doctor", "--json", "--reading", str(READINGS / "four_gpu_cvd0.json")])
    saved = tmp_path / "doctor.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["doctor", "--json", "--reading", str(saved)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["visible_devices"]["hidden"] == [1, 2, 3]
    assert [p["id"] for p in data["problems"]] == ["cuda-visible-devices-hides"]


@pytest.mark.parametrize("content, text", [(None, "cannot read it"), ("{not json", "not JSON"),
                                           ('{"python_version": 3}', "expected str")])
def test_bad_reading_file_exits_2(tmp_path, capsys, content, text):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    assert main(["doctor", "--reading", str(path)]) == 2
    assert text in capsys.readouterr().err


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_python_m_allgpu_doctor_json():
    proc = subprocess.run([sys.executable, "-m", "allgpu.doctor", "--json"], capture_output=True, text=True,
                          timeout=110)
    data = json.loads(proc.stdout)
    assert proc.returncode == data["exit_code"]
    assert data["reading"]["torch_version"]
