"""The command line that re-executes a script for its copies (allgpu.runtime.script_command), in-process."""

from __future__ import annotations

import sys
import types

from allgpu.runtime.script_command import script_command


def test_python_i_is_re_executed_without_its_prompt(monkeypatch, tmp_path):
    """python -i train.py: each copy opened an interactive prompt of its own after the script."""
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setattr(sys, "orig_argv", ["python3", "-X", "utf8", "-i", str(script), "-i", "x y"])
    monkeypatch.setattr(sys, "argv", [str(script), "-i", "x y"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(script), __spec__=None))
    assert script_command() == [sys.executable, "-X", "utf8", str(script), "-i", "x y"]


def test_a_script_under_pdb_has_its_copies_run_without_the_debugger(monkeypatch, tmp_path):
    """python -m pdb train.py: each copy started pdb too, which read no input and quit before joining the job."""
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setattr(sys, "orig_argv", ["python3", "-X", "utf8", "-m", "pdb", "-c", "continue", "train.py", "a"])
    monkeypatch.setattr(sys, "argv", [str(script), "a"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(script), __spec__=None))
    assert script_command() == [sys.executable, "-X", "utf8", str(script), "a"]
