"""TensorFlow / JAX / Keras readings: rules on recorded readings (tests/doctor_readings/frameworks), the child
process's crash and timeout handling, and one real reading of the tensorflow-cpu installed for the tests."""

from __future__ import annotations

import json
import os
import platform
import stat
from pathlib import Path

import pytest

from allgpu.cli.main import main
from allgpu.doctor.framework_rules import diagnose_frameworks
from allgpu.doctor.frameworks import FrameworksReading, installed_packages, read_frameworks
from allgpu.doctor.reading import EnvironmentReading, ReadingFormatError

READINGS = Path(__file__).parent / "doctor_readings" / "frameworks"


def load(name: str) -> tuple[EnvironmentReading, FrameworksReading]:
    data = json.loads((READINGS / f"{name}.json").read_text())
    return EnvironmentReading.from_dict(data["reading"]), FrameworksReading.from_dict(data["frameworks"])


def findings(name: str) -> list[tuple[str, str]]:
    env, fw = load(name)
    return [(p.id, p.severity) for p in diagnose_frameworks(fw, env)]


@pytest.mark.parametrize("name, expected", [
    ("tf_cpu_build_on_gpu", [("cpu-build", "error")]),
    ("tf_cuda_no_driver", [("no-driver", "error")]),
    ("tf_driver_too_old", [("cuda-version-mismatch", "error")]),
    ("tf_gpu_too_old", [("unsupported-compute-capability", "error")]),
    ("tf_hidden_devices", [("devices-hidden", "error")]),
    ("tf_both_packages", [("cpu-build", "warning"), ("cpu-build", "error")]),
    ("jax_cpu_only", [("cpu-build", "error")]),
    ("jax_cudnn_too_old", [("cuda-version-mismatch", "error")]),
    ("tf_missing_cuda_wheels", [("missing-cuda-libs", "error"), ("messages-hidden", "info")]),
    ("tf_memory_held", [("memory-held", "error")]),
    ("tf_import_crash", [("framework-import-failed", "error")]),
    ("tf_windows_native", [("cpu-build", "error")]),
    ("real_cpu_tf221", [("cpu-build", "info")]),
])
def test_rules_on_recorded_readings(name, expected):
    assert findings(name) == expected


def test_findings_carry_evidence_from_reading_fields_and_the_child_log():
    env, fw = load("tf_cuda_no_driver")
    [p] = diagnose_frameworks(fw, env)
    assert "tensorflow.built_with_cuda=True" in p.evidence
    assert any("Could not find cuda drivers" in e for e in p.evidence)
    env, fw = load("tf_driver_too_old")
    [p] = diagnose_frameworks(fw, env)
    assert "built for CUDA 12.5.1" in p.cause and "supports CUDA 11.4" in p.cause
    env, fw = load("tf_gpu_too_old")
    [p] = diagnose_frameworks(fw, env)
    assert "Tesla M60, 5.2" in p.cause and "6.0" in p.cause


def test_a_driver_one_minor_version_behind_is_not_a_mismatch():
    env, fw = load("tf_hidden_devices")  # driver CUDA 12.4, TensorFlow built for 12.5.1
    assert "cuda-version-mismatch" not in [p.id for p in diagnose_frameworks(fw, env)]


def test_hidden_devices_stop_being_reported_once_tensorflow_sees_them_all():
    env, fw = load("tf_hidden_devices")
    tf = fw.tensorflow.__class__(**{**fw.tensorflow.__dict__, "gpus": tuple(f"GPU:{i}" for i in range(4))})
    fixed = FrameworksReading.from_dict({**fw.to_dict(), "tensorflow": {**fw.to_dict()["tensorflow"],
                                                                         "gpus": list(tf.gpus)}})
    assert diagnose_frameworks(fixed, env) == []


def test_reading_round_trips_and_rejects_unknown_fields():
    env, fw = load("jax_cpu_only")
    assert FrameworksReading.from_dict(json.loads(json.dumps(fw.to_dict()))) == fw
    with pytest.raises(ReadingFormatError, match="unknown field"):
        FrameworksReading.from_dict({**fw.to_dict(), "pytorch": {}})


def test_doctor_reading_file_shows_tensorflow_beside_pytorch(capsys):
    code = main(["doctor", "--reading", str(READINGS / "tf_cpu_build_on_gpu.json")])
    out = capsys.readouterr().out
    assert code == 1
    assert "What each framework sees" in out and "TensorFlow" in out and "CPU build" in out
    assert "cpu-build" in out and "evidence:" in out


def test_doctor_reading_file_json_keeps_frameworks(capsys):
    main(["doctor", "--json", "--reading", str(READINGS / "tf_driver_too_old.json")])
    data = json.loads(capsys.readouterr().out)
    assert data["frameworks"]["tensorflow"]["cuda_version"] == "12.5.1"
    assert [p["id"] for p in data["problems"] if p["id"] == "cuda-version-mismatch"]


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


needs_tf = pytest.mark.skipif(not any(p.startswith("tensorflow") for p in installed_packages()),
                              reason="TensorFlow is installed by `make install` (the tf extra)")


@pytest.mark.replicas
@needs_tf
def test_a_framework_import_that_hangs_is_recorded_as_timed_out(tmp_path):
    fw = read_frameworks(timeout=1, python=_fake_python(tmp_path, 'echo "ALLGPU-BEGIN tensorflow"; sleep 20'))
    assert fw.tensorflow.error == "importing tensorflow timed out after 1 s"
    assert [p.id for p in diagnose_frameworks(fw)] == ["framework-import-failed"]


@pytest.mark.replicas
@needs_tf
def test_a_framework_import_that_crashes_is_recorded_with_its_exit_code(tmp_path):
    fw = read_frameworks(timeout=20, python=_fake_python(
        tmp_path, 'echo "ALLGPU-BEGIN tensorflow"; echo "Illegal instruction" >&2; kill -ILL $$'))
    assert fw.tensorflow.error.startswith("importing tensorflow crashed (exit code -4")
    assert "Illegal instruction" in fw.tensorflow.log


@pytest.mark.replicas
@needs_tf
def test_this_machine_shows_tensorflow_beside_pytorch(capsys):
    """`allgpu doctor --json` here: one real import of the tensorflow-cpu the test extra installs (seconds)."""
    code = main(["doctor", "--json", "--framework-timeout", "240"])
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == code
    fw = FrameworksReading.from_dict(data["frameworks"])
    assert fw.tensorflow is not None and fw.tensorflow.error is None
    assert fw.tensorflow.version.startswith("2.")
    assert fw.tensorflow.built_with_cuda is False and fw.tensorflow.gpus == ()
    assert fw.system == platform.system()
    # KERAS_BACKEND picks Keras's backend (tests/conftest.py sets it to torch for the whole session); default tensorflow
    assert fw.keras is not None and fw.keras.backend == os.environ.get("KERAS_BACKEND", "tensorflow")
    if not data["reading"]["gpus"]:  # the CPU-only CI machine: a CPU build with no GPU lost is only info
        assert {"id": "cpu-build", "severity": "info"}.items() <= next(
            p for p in data["problems"] if p["id"] == "cpu-build").items()
