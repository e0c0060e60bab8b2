"""Every CLI number option refuses a bad value as a usage error (exit 2) naming the option, before anything starts:
no traceback from deep inside (`bench --rounds 0` was a StatisticsError), no silent acceptance
(`run --max-restarts -1`, `doctor --steps 0`)."""

import pytest

from allgpu import errors
from allgpu.cli.main import build_parser, main

BAD = [
    ("demo", "--replicas", "0"), ("demo", "--epochs", "-1"), ("demo", "--batch-size", "x"),
    ("bench", "--replicas", "-1"), ("bench", "--steps", "0"), ("bench", "--rounds", "0"),
    ("doctor", "--steps", "0"), ("doctor", "--timeout", "0"), ("doctor", "--framework-timeout", "-5"),
    ("run", "--cpu-replicas", "0"), ("run", "--max-restarts", "-1"), ("run", "--node-rank", "-2"),
]


@pytest.mark.parametrize("command, option, value", BAD)
def test_a_bad_number_is_a_usage_error_naming_the_option(command, option, value, capsys):
    argv = [command, option, value] + (["train.py"] if command == "run" else [])
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and value in err


def test_good_numbers_pass():
    args = build_parser().parse_args(["run", "--cpu-replicas", "2", "--max-restarts", "0", "--node-rank", "0", "t.py"])
    assert (args.cpu_replicas, args.max_restarts, args.node_rank) == (2, 0, 0)
    assert build_parser().parse_args(["doctor", "--timeout", "2.5"]).timeout == 2.5


@pytest.mark.parametrize("error, code", [
    (errors.ArgumentError("bad --x"), 2), (errors.ScriptNotFoundError("no train.py"), 2),
    (errors.ReplicaFailedError("replica 1 failed"), 1), (errors.CorruptCheckpointError("bad sha256"), 1),
    (errors.CollectiveTimeoutError("replica 0 waited"), 1),
])
def test_exit_code_is_2_for_usage_errors_only_and_1_for_a_failed_run(monkeypatch, capsys, error, code):
    from allgpu.cli import demo

    def fail(args):
        raise error

    monkeypatch.setattr(demo, "run", fail)
    assert main(["demo"]) == code
    assert type(error).__name__ in capsys.readouterr().err



def test_run_takes_a_leading_python_as_srun_and_mpirun_users_type_it(monkeypatch, capsys):
    """`allgpu run --cpu-replicas 2 python train.py` stopped with "script 'python' not found"."""
    from allgpu.runtime import elastic

    seen = []
    monkeypatch.setattr(elastic, "run", lambda script, script_args, **kw: seen.append((script, script_args)) or 0)
    for interpreter in ("python", "python3", "/usr/bin/python3.11"):
        assert main(["run", "--cpu-replicas", "2", interpreter, "train.py", "--epochs", "3"]) == 0
    assert main(["run", "--cpu-replicas", "2", "python.py", "--epochs", "3"]) == 0  # a script named so stays
    assert seen == [("train.py", ["--epochs", "3"])] * 3 + [("python.py", ["--epochs", "3"])]
    assert main(["run", "python", "-m", "trainer"]) == 2
    assert "without interpreter options or -m" in capsys.readouterr().err
