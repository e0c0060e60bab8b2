"""The corpus tooling (scoring, split, fetch) on small made-up inputs: CI needs no corpus and no network."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from allgpu.lint.corpus_score import CorpusScore, matches, parse_evidence, read_rows, score_corpus, score_file
from allgpu.lint.findings import lint_finding

ROOT = Path(__file__).resolve().parent.parent
HEADER = "id\trepo\tpath\tcommit\tframework\tsource_kind\tsplit\texpected\tevidence\tlookalikes\tnotes\n"


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "lint_corpus" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def f(rule, line, cell=None):
    return lint_finding("x.py", line, 1, rule, "error", "m", cell=cell)


def test_parse_evidence_lines_and_cells():
    ev = parse_evidence("TF001:12,30;TF008:cell 3:4, cell 5:1")
    assert ev == {"TF001": [(None, 12), (None, 30)], "TF008": [(3, 4), (5, 1)]}
    with pytest.raises(ValueError):
        parse_evidence("TF001")


def test_match_tolerance_is_three_lines_in_the_same_cell():
    assert matches(f("TF001", 15), [(None, 12)]) and not matches(f("TF001", 16), [(None, 12)])
    assert matches(f("TF008", 4, cell=3), [(3, 2)]) and not matches(f("TF008", 4, cell=2), [(3, 4)])
    assert matches(f("TF008", 99), [])  # no evidence: anywhere in the file


def test_score_file_counts_tp_fp_fn_per_file_and_rule():
    row = {"id": "t1", "expected": "TF001,TF007", "evidence": "TF001:10;TF007:20"}
    out = CorpusScore()
    score_file(row, [f("TF001", 11), f("TF007", 40), f("TF009", 5), f("TF009", 6)], out, None)
    s = out.rules
    assert (s["TF001"].tp, s["TF001"].fp, s["TF001"].fn) == (1, 0, 0)
    assert (s["TF007"].tp, s["TF007"].fp, s["TF007"].fn) == (0, 1, 1)  # reported, but far from the evidence
    assert (s["TF009"].tp, s["TF009"].fp, s["TF009"].fn) == (0, 1, 0)  # one FP per file and rule
    assert out.total.precision == pytest.approx(1 / 3) and out.total.recall == pytest.approx(1 / 2)


def test_split_is_seeded_per_family_and_never_changes(tmp_path):
    split = load("split")
    rows = [{"id": f"{p}{i:03d}", "split": ""} for p in ("tf", "pt") for i in range(9)]
    again = [dict(r) for r in rows]
    assert split.assign(rows) == {"pt": 9, "tf": 9}
    split.assign(again)
    assert rows == again  # same seed, same split
    assert sum(r["split"] == "tune" for r in rows if r["id"].startswith("tf")) == 5
    before = [dict(r) for r in rows]
    assert split.assign(rows) == {"pt": 0, "tf": 0} and rows == before  # assigned once, kept


@pytest.mark.replicas
def test_fetch_from_a_local_mirror_and_reports_what_is_missing(tmp_path):
    fetch = load("fetch")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    git = ["git", "-C", str(src), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "train.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    commit = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    mirrors = tmp_path / "mirrors" / "own+repo"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(mirrors / "repo")], check=True)
    tsv = tmp_path / "c.tsv"
    tsv.write_text(HEADER + f"a1\town/repo\ttrain.py\t{commit}\ttf\trepo\t\t\t\t\t\n"
                   f"a2\town/repo\tnope.py\t{commit}\ttf\trepo\t\t\t\t\t\n")
    rows = fetch.read_corpus(tsv)
    missing = fetch.fetch_all(rows, tmp_path / "cache", tmp_path / "mirrors", network=False)
    assert (tmp_path / "cache" / "a1" / "train.py").read_text() == "print('hi')\n"
    assert len(missing) == 1 and missing[0].startswith("a2 ")
    sc, miss = score_corpus(read_rows(tsv), tmp_path / "cache")
    assert sc.files == 1 and miss == ["a2"] and sc.crashes == []


def test_corpus_tsv_is_well_formed():
    rows = read_rows(ROOT / "benchmarks" / "lint_corpus" / "corpus.tsv")
    assert len(rows) >= 120 and len({r["id"] for r in rows}) == len(rows)
    from allgpu.lint import RULES
    for r in rows:
        assert len(r["commit"]) == 40 and r["split"] in ("tune", "heldout"), r["id"]
        expected = {x for x in r["expected"].split(",") if x}
        assert expected <= set(RULES), r["id"]
        assert set(parse_evidence(r["evidence"])) <= expected, r["id"]
