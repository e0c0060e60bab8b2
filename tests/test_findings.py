"""The one Finding of lint, doctor and the monitor: fields, compat aliases, severity order, exit codes, shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import allgpu.checkpoint
import allgpu.doctor
import allgpu.lint
import allgpu.monitor
from allgpu import errors
from allgpu.doctor import EnvironmentReading, Problem, diagnose
from allgpu.doctor.report import problem_dict
from allgpu.findings import SEVERITIES, Finding, Location, by_severity, exit_code
from allgpu.lint.output import finding_dict
from allgpu.monitor import PHASES, EpochReport, ReplicaFigures


def _lint_finding():
    [f] = allgpu.lint.check_source("import torch\nnet = torch.nn.DataParallel(model)\n", "t.py")
    return f


def test_the_three_tools_share_one_type():
    assert allgpu.lint.Finding is Finding and allgpu.monitor.Finding is Finding and allgpu.doctor.Finding is Finding
    assert type(_lint_finding()) is Finding
    raw = json.loads((Path(__file__).parent / "doctor_readings" / "four_gpu_cvd0.json").read_text())
    reading = EnvironmentReading.from_dict(raw.get("reading", raw))
    assert diagnose(reading) and all(type(p) is Finding for p in diagnose(reading))


def test_lint_finding_keeps_its_attribute_names():
    f = _lint_finding()
    assert (f.id, f.rule_id, f.severity) == ("PT001", "PT001", "warning")
    assert (f.path, f.line, f.col, f.cell, f.file_line) == ("t.py", 2, 7, None, None)
    assert f.location() == str(f.location) == "t.py:2:7"
    assert "--explain PT001" in f.fix and f.replica is None and f.devices == ()


def test_notebook_location_names_the_cell():
    f = Finding("E999", "error", "m", location=Location("nb.ipynb", 3, 1, cell=4, file_line=40))
    assert f.location() == "nb.ipynb:cell 4:3:1" and (f.cell, f.file_line) == (4, 40)


def test_problem_is_the_doctor_spelling_of_a_finding():
    p = Problem("idle", "warning", "GPU 1 idles.", "Use it.", [1], evidence=["nvidia-smi: 0%"])
    assert type(p) is Finding and isinstance(p, Problem) and not isinstance("x", Problem)
    assert (p.cause, p.message, p.devices, p.evidence) == ("GPU 1 idles.", "GPU 1 idles.", (1,), ("nvidia-smi: 0%",))
    assert p == Finding("idle", "warning", "GPU 1 idles.", "Use it.", devices=(1,), evidence=("nvidia-smi: 0%",))
    with pytest.raises(errors.FindingError, match="fix must not be empty"):
        Problem("idle", "warning", "cause.", "")


@pytest.mark.parametrize("kwargs, text", [(dict(id="x", severity="fatal", message="m"), "severity 'fatal'"),
                                          (dict(id="", severity="info", message="m"), "id must not be empty"),
                                          (dict(id="x", severity="info", message=""), "message must not be empty")])
def test_bad_findings_are_a_value_error(kwargs, text):
    with pytest.raises(ValueError, match=text) as info:
        Finding(**kwargs)
    assert isinstance(info.value, errors.FindingError) and isinstance(info.value, errors.AllGpuError)


def test_by_severity_is_stable_and_exit_code_has_a_threshold():
    found = [Finding("a", "info", "m"), Finding("b", "warning", "m"), Finding("c", "error", "m"),
             Finding("d", "warning", "m")]
    assert [f.id for f in by_severity(found)] == ["c", "b", "d", "a"]
    assert [f.rank for f in found] == [2, 1, 0, 1] and SEVERITIES == ("error", "warning", "info")
    assert exit_code(found) == 1 and exit_code(found[:2]) == 0 and exit_code([]) == 0
    assert exit_code(found[:1], fail_on="info") == 1 and exit_code(found[:1], fail_on="warning") == 0
    assert allgpu.doctor.exit_code is exit_code
    with pytest.raises(errors.FindingError, match="fail_on='fatal'"):
        exit_code(found, fail_on="fatal")


def test_shared_shape_round_trips():
    f = Finding("PT001", "warning", "m", "fix", Location("a.py", 2, 9), replica=1, devices=[0, 2], evidence=["e"])
    data = json.loads(json.dumps(f.to_dict()))
    assert data["location"] == {"path": "a.py", "line": 2, "col": 9, "cell": None, "file_line": None}
    assert Finding.from_dict(data) == f and hash(Finding.from_dict(data)) == hash(f)
    with pytest.raises(errors.FindingError, match=r"unknown keys \['cause'\], missing keys \['message'\]"):
        Finding.from_dict({"id": "x", "severity": "info", "cause": "c"})


def test_each_tool_keeps_its_json_shape():
    f = _lint_finding()
    assert list(finding_dict(f)) == ["path", "line", "col", "rule_id", "severity", "message", "cell", "file_line"]
    p = Problem("x", "error", "cause.", "fix.", (3,))
    assert problem_dict(p) == {"id": "x", "severity": "error", "cause": "cause.", "fix": "fix.", "devices": [3]}
    assert problem_dict(Problem("x", "error", "c.", "f.", evidence=("seen",)))["evidence"] == ["seen"]
    m = Finding("straggler", "warning", "slow.", "fix.", replica=1)
    report = EpochReport(0, [ReplicaFigures(0, "h", "cpu", 1, 1, dict.fromkeys(PHASES, 0.25))], [m])
    assert report.to_dict()["diagnosis"] == [{"id": "straggler", "severity": "warning", "replica": 1,
                                              "message": "slow.", "fix": "fix."}]
    assert EpochReport.from_dict(json.loads(json.dumps(report.to_dict()))).diagnosis == [m]


@pytest.mark.parametrize("error, old_home, builtin", [
    (errors.ReadingFormatError, allgpu.doctor, ValueError),
    (errors.LintUsageError, allgpu.lint, ValueError),
    (errors.CorruptCheckpointError, allgpu.checkpoint, RuntimeError),
])
def test_typed_errors_live_in_errors_and_at_their_old_names(error, old_home, builtin):
    assert getattr(old_home, error.__name__) is error
    assert issubclass(error, errors.AllGpuError) and issubclass(error, builtin)


def test_notebook_and_rule_errors_are_typed():
    from allgpu.lint.notebook import NotebookError, read_notebook

    assert NotebookError is errors.NotebookError and issubclass(NotebookError, ValueError)
    with pytest.raises(errors.NotebookError):
        read_notebook("not json")
    with pytest.raises(KeyError, match="unknown rule 'XX1'") as info:
        allgpu.lint.explain("XX1")
    assert isinstance(info.value, errors.UnknownRuleError) and str(info.value).startswith("unknown rule 'XX1'")
