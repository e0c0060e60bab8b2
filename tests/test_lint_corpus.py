"""The corpus tooling (scoring, split, fetch) on small made-up inputs: CI needs no corpus and no network."""

import importlib.util
import json
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


# ---- the author-fix corpus (issue 21): labels from fix commits written by the files' own authors ----------------

def load_bench(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wilson_interval():
    from allgpu.lint.author_score import wilson
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.490, abs=1e-3) and hi == pytest.approx(0.943, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0) and wilson(5, 5)[1] == 1.0 and wilson(0, 5)[0] == 0.0


def test_score_entry_counts_before_as_positive_and_after_as_negative():
    from allgpu.lint.author_score import AuthorScore, score_entry
    e = {"id": "a1", "labels": ["PT004", "TF008"], "framework": "pt", "after_negative": True,
         "lines_before": [12], "lines_after": [13]}
    out = AuthorScore()
    score_entry(e, "before", [f("PT004", 40)], out)  # file level: anywhere in the file counts
    score_entry(e, "after", [f("TF008", 5), f("PT011", 3)], out)  # PT011 untouched by the authors: not scored
    pt, tf = out.labels["PT004"], out.labels["TF008"]
    assert (pt.tp, pt.fp, pt.fn, pt.tn) == (1, 0, 0, 1) and (tf.tp, tf.fp, tf.fn, tf.tn) == (0, 1, 1, 0)
    assert "PT011" not in out.labels and out.total.precision == 0.5 and out.total.recall == 0.5
    assert sorted(m[3] for m in out.mistakes) == ["FN", "FP"] and ("a1", "after", "TF008", "FP", "5") in out.mistakes
    e2 = dict(e, id="a2", after_negative=False)
    score_entry(e2, "after", [f("PT004", 1)], out)  # the authors left another instance: the after file is not used
    assert out.labels["PT004"].fp == 0


def test_author_split_is_by_repository_and_never_changes():
    split = load("author_split")
    assert split.half("pytorch/examples") == split.half("pytorch/examples")
    halves = {split.half(f"owner{i}/repo") for i in range(40)}
    assert halves == {"tune", "heldout"}
    entries = [json.loads(x) for x in (ROOT / "benchmarks" / "lint_corpus" / "author_labels.jsonl").read_text()
               .splitlines() if x.strip()]
    for e in entries:
        assert e["split"] == split.half(e["repo"]), e["id"]  # the recorded half is the seeded hash's
    tsv = (ROOT / "benchmarks" / "lint_corpus" / "author_split.tsv").read_text().splitlines()[1:]
    assert {line.split("\t")[0]: line.split("\t")[1] for line in tsv} == {e["repo"]: e["split"] for e in entries}


def test_author_labels_are_well_formed():
    from allgpu.lint import RULES
    here = ROOT / "benchmarks" / "lint_corpus"
    entries = [json.loads(x) for x in (here / "author_labels.jsonl").read_text().splitlines() if x.strip()]
    excluded = [json.loads(x) for x in (here / "author_excluded.jsonl").read_text().splitlines() if x.strip()]
    assert len({e["id"] for e in entries}) == len(entries) >= 20
    keys = {(e["repo"], e["after"], e["path"]) for e in entries}
    assert len(keys) == len(entries) and not keys & {(e["repo"], e["after"], e["path"]) for e in excluded}
    for e in entries:
        assert len(e["before"]) == len(e["after"]) == 40 and e["before"] != e["after"], e["id"]
        assert len(e["sha256_before"]) == len(e["sha256_after"]) == 64, e["id"]
        assert e["labels"] and set(e["labels"]) <= set(RULES), e["id"]
        assert e["kind"] == "author-fix" and e["url"].endswith(e["after"]) and e["message"], e["id"]
    assert all(x["reason"] for x in excluded)


@pytest.mark.replicas
def test_build_takes_both_versions_from_a_mirror_and_checks_sha256(tmp_path):
    import hashlib
    build = load_bench("lint_corpus_build")
    src = tmp_path / "src"
    src.mkdir()
    git = ["git", "-C", str(src), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    commits = []
    for text in ("loader = DataLoader(ds)\n", "loader = DataLoader(ds, num_workers=4)\n"):
        (src / "train.py").write_text(text)
        subprocess.run(git + ["add", "train.py"], check=True)
        subprocess.run(git + ["commit", "-qm", "x"], check=True)
        commits.append(subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "m" / "own+repo" / "repo")], check=True)
    sha = [hashlib.sha256(t.encode()).hexdigest() for t in ("loader = DataLoader(ds)\n",
                                                            "loader = DataLoader(ds, num_workers=4)\n")]
    good = {"id": "a1", "repo": "own/repo", "path": "train.py", "before": commits[0], "after": commits[1],
            "sha256_before": sha[0], "sha256_after": sha[1]}
    bad = dict(good, id="a2", sha256_after="0" * 64)
    gone = dict(good, id="a3", repo="own/absent")
    skipped, single = build.build([good, bad, gone], tmp_path / "cache", tmp_path / "m", network=False)
    assert (tmp_path / "cache" / "a1" / "after" / "train.py").read_text().endswith("num_workers=4)\n")
    assert (tmp_path / "cache" / "a1" / "tree-after" / "train.py").read_text().endswith("num_workers=4)\n")
    assert [s.split()[0] for s in skipped] == ["a2", "a3"] and single == []
    assert "sha256" in skipped[0] and "no mirror" in skipped[1]


@pytest.mark.replicas
def test_build_puts_the_file_in_its_project_tree_with_the_modules_it_imports(tmp_path):
    import hashlib
    build = load_bench("lint_corpus_build")
    src = tmp_path / "src"
    files = {"pkg/train.py": "from utils import make_loader\nfrom ..common import dist\nimport models.net\n",
             "pkg/utils.py": "import helpers2\n", "pkg/other.py": "", "pkg/notes.txt": "",
             "helpers2.py": "", "common/dist.py": "", "models/net.py": "", "models/__init__.py": "",
             "unrelated/x.py": "", "pkg/sub/deep.py": ""}
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    git = ["git", "-C", str(src), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    commit = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "m" / "own+repo" / "repo")], check=True)
    sha = hashlib.sha256(files["pkg/train.py"].encode()).hexdigest()
    entry = {"id": "a1", "repo": "own/repo", "path": "pkg/train.py", "before": commit, "after": commit,
             "sha256_before": sha, "sha256_after": sha}
    assert build.build([entry], tmp_path / "cache", tmp_path / "m", network=False) == ([], [])
    manifest = json.loads(build.manifest_file(tmp_path / "cache", entry, "before").read_text())
    # the .py files of the folder and its parents, what its imports resolve to (two levels: utils -> helpers2)
    assert sorted(manifest["files"]) == ["common/dist.py", "helpers2.py", "models/__init__.py", "models/net.py",
                                         "pkg/other.py", "pkg/utils.py"]
    assert "unrelated/x.py" not in manifest["files"] and "pkg/sub/deep.py" not in manifest["files"]
    assert manifest["commit"] == commit and manifest["files"]["pkg/other.py"] == hashlib.sha256(b"").hexdigest()
    assert build.project_file(tmp_path / "cache", entry, "after").read_text() == files["pkg/train.py"]
    # a thread-confirmed row labelling a repository file gets the same tree; one whose bytes differ stays alone
    row = {"id": "t1", "repo": "own/repo", "path": "pkg/train.py", "commit": commit, "sha256": sha}
    alone = build.build_thread_trees([row, dict(row, id="t2", sha256="0" * 64), {"id": "t3", "site": "so"}],
                                     tmp_path / "trees", tmp_path / "m")
    assert [a.split()[0] for a in alone] == ["t2"]
    assert build.thread_tree_file(tmp_path / "trees", row).read_text() == files["pkg/train.py"]
    assert (tmp_path / "trees" / "t1" / "pkg" / "utils.py").is_file()


# ---- thread-confirmed snippets (issue 21): code pasted in public threads, the pitfall named by a reply -----------

def test_thread_cache_add_load_and_a_missing_cache_names_what_is_missing(tmp_path):
    tc = load("thread_cache")
    stage, cache, rows = tmp_path / "stage", tmp_path / "cache", tmp_path / "t.jsonl"
    stage.mkdir()
    head = ("url: https://github.com/own/repo/issues/1\nrepo: own/repo\nthread: 1\ncode_in: description\n"
            "settled_by: maintainer\nsettled_ref: x\nframework: pt\nnote: n\n")
    (stage / "t0001.txt").write_text(head + "labels: PT003\n---\nimport torch\n")
    (stage / "t0002.txt").write_text(head + "negatives: PT003\n---\nprint(1)\n")
    assert tc.add(stage, rows, cache) == 2 and tc.add(stage, rows, cache) == 0
    got = tc.read_rows(rows)
    assert [r["labels"] for r in got] == [["PT003"], []] and got[1]["negatives"] == ["PT003"]
    assert got[0]["split"] == load("author_split").half("own/repo") and got[0]["lines"] == 1
    assert set(tc.load(got, cache)) == {"t0001", "t0002"}
    (cache / "t0002.py").unlink()
    (cache / "t0001.py").write_text("changed\n")
    with pytest.raises(tc.ThreadCacheError, match=r"1 of 2 snippets missing \(t0002\).*t0001"):
        tc.load(got, cache)


def test_thread_labels_are_well_formed():
    tc = load("thread_cache")
    from allgpu.lint import RULES
    rows = tc.read_rows()
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["labels"] or r["negatives"], r["id"]
        assert set(r["labels"]) | set(r["negatives"]) <= set(RULES), r["id"]
        assert r["settled_by"] in tc.SETTLED_BY and len(r["sha256"]) == 64 and r["url"].startswith("https://")
        assert r["split"] == load("author_split").half(tc.split_key(r)), r["id"]


def test_mine_reads_a_notebooks_code_cells_for_the_per_file_scan():
    """``mine.py --per-file`` compares notebooks by their code cells: a batch constant that becomes
    ``8 * strategy.num_replicas_in_sync`` is a TF007 candidate; markdown and outputs are not read."""
    mine = load("mine")

    def nb(batch):
        cells = [{"cell_type": "markdown", "source": ["num_replicas_in_sync is explained here"]},
                 {"cell_type": "code", "source": ["strategy = tf.distribute.TPUStrategy(resolver)\n",
                                                  f"BATCH_SIZE = {batch}\n"], "outputs": []}]
        return json.dumps({"cells": cells})

    before = mine.notebook_code("t.ipynb", nb("64"))
    after = mine.notebook_code("t.ipynb", nb("8 * strategy.num_replicas_in_sync"))
    assert "explained" not in before and "BATCH_SIZE = 64" in before
    assert mine.SPECS["TF007"](before, after) and not mine.SPECS["TF007"](after, after)
    assert mine.notebook_code("train.py", "x = 1\n") == "x = 1\n"
