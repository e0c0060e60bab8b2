"""The CLI as a stranger meets it: what README.md and docs/cli.md promise about odd inputs and outputs."""

import json

from allgpu.cli.main import main


def _lint(capsys, *argv):
    code = main(["lint", *map(str, argv)])
    return code, capsys.readouterr().out


def test_sarif_uri_of_a_path_with_a_space_is_percent_encoded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my script.py").write_text("import torch.nn as nn\nmodel = nn.DataParallel(model)\n")
    code, out = _lint(capsys, "my script.py", "--format", "sarif")
    loc = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert code == 1 and loc["uri"] == "my%20script.py"


def test_unreadable_bytes_name_the_fix_and_do_not_contradict_themselves(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "latin.py").write_bytes(b"\xff\xfe x = 1\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    code, out = _lint(capsys, "latin.py", "broken.py", "--format", "json")
    msgs = {f["path"]: f["message"] for f in json.loads(out)["findings"]}
    assert code == 1
    assert "Fix: save the file as UTF-8" in msgs["latin.py"]
    assert "nothing in the file was checked" in msgs["broken.py"]
    assert "the parts that parse were checked" not in msgs["broken.py"]
