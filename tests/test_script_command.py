"""The command line that re-executes a script for its copies (allgpu.runtime.script_command), in-process."""

from __future__ import annotations

import sys
import types

import pytest

from allgpu.runtime.script_command import script_command


def test_python_i_is_re_executed_without_its_prompt(monkeypatch, tmp_path):
    """python -i train.py: each copy opened an interactive prompt of its own after the script."""
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setattr(sys, "orig_argv", ["python3", "-X", "utf8", "-i", str(script), "-i", "x y"])
    monkeypatch.setattr(sys, "argv", [str(script), "-i", "x y"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(script), __spec__=None))
    assert script_command() == [sys.executable, "-X", "utf8", str(script), "-i", "x y"]


@pytest.mark.parametrize("runner", [["pdb", "-c", "continue"], ["cProfile", "-o", "replica0.prof"]])
def test_a_script_under_pdb_or_cprofile_has_its_copies_run_without_it(monkeypatch, tmp_path, runner):
    """python -m pdb train.py: each copy started pdb too, which read no input and quit before joining the job;
    python -m cProfile -o out.prof: each copy wrote the same file."""
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setattr(sys, "orig_argv", ["python3", "-X", "utf8", "-m", *runner, "train.py", "a"])
    monkeypatch.setattr(sys, "argv", [str(script), "a"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(script), __spec__=None))
    assert script_command() == [sys.executable, "-X", "utf8", str(script), "a"]
