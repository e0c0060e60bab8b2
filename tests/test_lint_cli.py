"""`allgpu lint` end to end: exit codes, formats (text, JSON, SARIF 2.1.0), select/ignore, noqa, notebooks."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from allgpu.cli.main import main
from allgpu.lint import RULES, check_source, explain

BAD = "import torch.nn as nn\nmodel = nn.DataParallel(model)\n"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def run_cli(capsys, *argv):
    code = main(["lint", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_codes(tmp_path, capsys):
    clean = write(tmp_path, "clean.py", "print('hi')\n")
    bad = write(tmp_path, "bad.py", BAD)
    assert run_cli(capsys, clean)[0] == 0
    code, out, _ = run_cli(capsys, bad)
    assert code == 1 and "bad.py:2:9: PT001 [warning]" in out
    assert run_cli(capsys, tmp_path / "missing.py")[0] == 2
    assert run_cli(capsys, bad, "--select", "XX9")[0] == 2
    assert run_cli(capsys)[0] == 2


def test_folder_recursive_and_unparseable_file_is_a_finding(tmp_path, capsys):
    write(tmp_path, "a/py2.py", "print 'hello'\n")
    write(tmp_path, "a/b/bad.py", BAD)
    write(tmp_path, ".venv/lib/skipped.py", BAD)
    code, out, err = run_cli(capsys, tmp_path)
    assert code == 1 and "Traceback" not in out + err
    assert "py2.py:1:1: E999" in out and "(Python 2 code?)" in out
    assert "bad.py:2:9: PT001" in out and "skipped.py" not in out


def test_select_and_ignore(tmp_path, capsys):
    bad = write(tmp_path, "bad.py", BAD + "import torch\nsd = torch.load('x')\n")
    assert "PT011" not in run_cli(capsys, bad, "--select", "PT001")[1]
    out = run_cli(capsys, bad, "--ignore", "PT001")[1]
    assert "PT011" in out and "PT001" not in out
    assert run_cli(capsys, bad, "--ignore", "PT")[0] == 0


def test_noqa():
    src = BAD.replace("(model)\n", "(model)  # allgpu: noqa\n")
    assert check_source(src, "t.py") == []
    assert check_source(BAD.replace("(model)\n", "(model)  # allgpu: noqa[PT001]\n"), "t.py") == []
    assert [f.rule_id for f in check_source(BAD.replace("(model)\n", "(model)  # allgpu: noqa[PT002]\n"), "t.py")] == ["PT001"]


def test_json_format(tmp_path, capsys):
    bad = write(tmp_path, "bad.py", BAD)
    data = json.loads(run_cli(capsys, bad, "--format", "json")[1])
    assert data["files_checked"] == 1
    assert data["findings"][0] | {"path": None} == {"path": None, "line": 2, "col": 9, "rule_id": "PT001",
                                                    "severity": "warning", "message": data["findings"][0]["message"],
                                                    "cell": None, "file_line": None}


def test_sarif_format(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "src/bad.py", BAD)
    log = json.loads(run_cli(capsys, "src", "--format", "sarif")[1])
    assert log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} == set(RULES)
    res = run["results"][0]
    assert rules[res["ruleIndex"]]["id"] == res["ruleId"] == "PT001"
    assert res["level"] == "warning" and res["message"]["text"]
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "src/bad.py"
    assert loc["region"] == {"startLine": 2, "startColumn": 9}


def test_explain(capsys):
    code, out, _ = run_cli(capsys, "--explain", "tf001")
    assert code == 0 and out.startswith("TF001 (error") and "strategy.scope()" in out
    assert run_cli(capsys, "--explain", "ZZ123")[0] == 2
    for rid in RULES:
        assert "Fix" in explain(rid) or rid == "E999" or "fix" in explain(rid).lower()


def notebook(*cells):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                       "cells": [{"cell_type": t, "metadata": {}, "source": s, "outputs": [], "execution_count": None}
                                 for t, s in cells]})


def test_notebook_cells_magics_and_broken_cell():
    nb = notebook(("markdown", "# title"),
                  ("code", "!pip install torch\n%matplotlib inline\nimport torch.nn as nn"),
                  ("code", "%%bash\necho ) not python ("),
                  ("code", "print 'py2 cell'"),
                  ("code", "model = nn.DataParallel(model)\nx = 1"))
    found = check_source(nb, "nb.ipynb")
    assert [(f.rule_id, f.cell, f.line) for f in found] == [("E999", 4, 1), ("PT001", 5, 1)]
    assert found[1].location() == "nb.ipynb:cell 5:1:9"


def test_notebook_sarif_points_at_the_line_of_the_ipynb_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = json.dumps(json.loads(notebook(("markdown", "# t"), ("code", ["import torch.nn as nn\n", "m = nn.DataParallel(m)\n"]))),
                     indent=1, sort_keys=True)
    (tmp_path / "nb.ipynb").write_text(raw)
    res = json.loads(run_cli(capsys, "nb.ipynb", "--format", "sarif")[1])["runs"][0]["results"][0]
    line = res["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert "nn.DataParallel" in raw.splitlines()[line - 1]
    assert res["properties"] == {"cell": 2, "lineInCell": 2}


def test_notebook_not_json_is_a_finding():
    [f] = check_source("{not json", "nb.ipynb")
    assert f.rule_id == "E999" and "JSON" in f.message


@pytest.mark.replicas
def test_check_source_api_and_never_imports_frameworks():
    code = ("import sys, allgpu.lint as L\n"
            "src = 'import torch\\nimport tensorflow as tf\\nx = torch.load(\"a\")\\n'\n"
            "print([f.rule_id for f in L.check_source(src, 'x.py')])\n"
            "print(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split("\n")
    assert out[0] == "['PT011']" and out[1] == "[]"


@pytest.mark.parametrize("bad_text", ["\x00\x01", "def f(:\n", "x = (" * 200 + ")" * 200])
def test_weird_input_never_raises(bad_text):
    found = check_source(bad_text, "w.py")
    assert all(f.rule_id == "E999" for f in found)


def test_statistics_and_exit_zero(tmp_path, capsys):
    bad = write(tmp_path, "bad.py", BAD + "import torch\nsd = torch.load('x')\nsd2 = torch.load('y')\n")
    code, out, _ = run_cli(capsys, bad, "--statistics")
    lines = out.splitlines()
    assert code == 1 and lines[0].split()[:2] == ["2", "PT011"] and lines[1].split()[:2] == ["1", "PT001"]
    assert "bad.py:" not in out and lines[-1] == "3 finding(s) in 1 file(s)"
    data = json.loads(run_cli(capsys, bad, "--statistics", "--format", "json")[1])
    assert data["statistics"][0] == {"rule_id": "PT011", "count": 2, "severity": "warning",
                                     "title": RULES["PT011"].title}
    code, out, _ = run_cli(capsys, bad, "--exit-zero")
    assert code == 0 and "PT001" in out
    assert run_cli(capsys, tmp_path / "missing.py", "--exit-zero")[0] == 2


def test_findings_sorted_by_file_then_line_and_stable(tmp_path, capsys):
    write(tmp_path, "b.py", "import torch\nx = torch.load('a')\n" + BAD)
    write(tmp_path, "a.py", BAD + "import torch\nx = torch.load('a')\n")
    out1 = run_cli(capsys, tmp_path / "b.py", tmp_path / "a.py")[1]
    out2 = run_cli(capsys, tmp_path / "a.py", tmp_path / "b.py")[1]
    locs = [ln.split(": ")[0] for ln in out1.splitlines()[:-1]]
    assert out1 == out2 and len(locs) == 4
    assert locs == sorted(locs, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


@pytest.mark.replicas
def test_parser_warnings_about_user_code_are_not_printed():
    code = ("import warnings; warnings.simplefilter('default')\nfrom allgpu.lint import check_source\n"
            "check_source('y = 1if 2 else 3\\nz = \"\\\\d\"\\n', 'a.py')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr


def test_notebook_percent_formatting_on_a_continuation_line_is_python_not_a_magic():
    nb = notebook(("code", "x = 1\nprint('epoch %d'\n      %(x))\n%time y = 2\n!ls"))
    assert check_source(nb, "nb.ipynb") == []


def test_docs_lint_has_a_section_with_the_fix_for_every_rule():
    from allgpu.lint.catalog import RULES
    text = (Path(__file__).resolve().parent.parent / "docs" / "lint.md").read_text()
    sections = text.split("\n## ")[1:]
    by_id = {s.split(":", 1)[0]: s for s in sections}
    assert set(by_id) == set(RULES)
    for rid, body in by_id.items():
        assert "**Fix:**" in body, rid
        assert RULES[rid].fix, rid


def test_notebook_shell_continuations_leading_indent_and_automagic_run_in_ipython():
    """What IPython runs is not a syntax error (found on Vertex AI, Qwen and handson-ml notebooks): a ``!cmd \\``
    shell command's continuation lines, a cell whose first line is indented (IPython strips that indentation),
    and automagic lines (``pip install x``, ``cd data``). A real error in another cell is still E999."""
    nb = notebook(("code", "!pip install a \\\n    google-cloud-storage \\\n    torch\nimport torch.nn as nn"),
                  ("code", " params = {\n    'batch_size': 32,\n }\nmodel = nn.DataParallel(model)"),
                  ("code", "pip install diffusers\ncd data\nls = [1]\ntime = 5"),
                  ("code", "class Runner:\u00df\n    pass"))
    found = check_source(nb, "nb.ipynb")
    assert [(f.rule_id, f.cell, f.line) for f in found] == [("PT001", 2, 4), ("E999", 4, 2)]
