"""Every CLI number option refuses a bad value as a usage error (exit 2) naming the option, before anything starts:
no traceback from deep inside (`bench --rounds 0` was a StatisticsError), no silent acceptance
(`run --max-restarts -1`, `doctor --steps 0`)."""

import pytest

from allgpu.cli.main import build_parser

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
