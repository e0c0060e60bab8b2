"""Turn reviewed fix commits into entries of author_labels.jsonl / author_excluded.jsonl (run by the labeller).

Run: python benchmarks/lint_corpus/author_record.py DECISIONS.tsv [--mirror-root DIR]

DECISIONS.tsv: one reviewed (commit, file) a line, tab-separated:
``repo  commit  path  labels  accept|exclude  after_negative(y|n)  note``. ``commit`` is the authors' fixing commit
(a unique prefix will do); its first parent is the "before" version. For each accepted line this writes the entry
with both commits in full, the commit's first message line, whether the commit is on the default branch
(merged) or only on another ref (a pull request's branch), sha256 of both versions, the framework (from the
file's imports), the lines of the before and after versions where the fix's hunks start, the split half
(``author_split.half``) and the commit URL. Entries are appended in a stable order (by repo, commit, path) and
ids (``a0001``...) are kept for entries already recorded, so re-running with more decisions changes nothing
already there. ``--first-id N``: new ids are the free numbers from N on (``aNNNN`` accepted, ``xNNNN`` excluded),
so labellers mining in parallel take separate ranges and never collide.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from author_split import half  # noqa: E402

LABELS, EXCLUDED = HERE / "author_labels.jsonl", HERE / "author_excluded.jsonl"
TOKENS = {"PT001": r"DataParallel", "PT002": r"cuda|local_rank|device", "PT003": r"[Ss]ampler",
          "PT004": r"set_epoch", "PT005": r"workers", "PT006": r"no_sync", "PT007": r"save|rank|main_process|master",
          "PT008": r"SyncBatchNorm", "PT009": r"DistributedDataParallel|DDP|FSDP",
          "PT010": r"CUDA_VISIBLE|visible_devices", "PT011": r"weights_only", "TF001": r"scope",
          "TF002": r"tf\.device", "TF003": r"CUDA_VISIBLE|visible_devices",
          "TF004": r"distribute_dataset|distribute_datasets", "TF005": r"\.run\(|experimental_run_v2",
          "TF006": r"compute_average_loss|Reduction", "TF007": r"num_replicas_in_sync|batch",
          "TF008": r"prefetch", "TF009": r"num_parallel_calls", "TF010": r"apply_gradients|accum",
          "TF011": r"tf\.function"}


def git(gd: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={gd}", *args], capture_output=True, check=True).stdout


def git_dir(mirror_root: Path, repo: str) -> Path:
    base = mirror_root / repo.replace("/", "+")
    return next(p for p in (base, base / "repo", base / "repo" / ".git") if (p / "HEAD").is_file())


def framework(text: str) -> str:
    tf = bool(re.search(r"^\s*(import|from)\s+(tensorflow|keras|tf_keras)\b", text, re.M)) or "tf.distribute" in text
    pt = bool(re.search(r"^\s*(import|from)\s+(torch|lightning|pytorch_lightning|accelerate)\b", text, re.M))
    return "tf" if tf and not pt else "pt" if pt and not tf else "mixed" if tf else "unknown"


def hunk_lines(gd: Path, before: str, after: str, path: str, labels: list[str]) -> tuple[list[int], list[int]]:
    """First line numbers (before, after) of the diff hunks whose changed lines carry a label's token."""
    tok = re.compile("|".join(TOKENS.get(r, r) for r in labels))
    diff = git(gd, "diff", "-U0", before, after, "--", path).decode("utf-8", "replace").splitlines()
    out_b, out_a, cur = [], [], None
    for line in diff:
        m = re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)
        if m:
            cur = (max(int(m.group(1)), 1), max(int(m.group(2)), 1))
        elif cur and line[:1] in "+-" and not line.startswith(("+++", "---")) and tok.search(line):
            if cur[0] not in out_b:
                out_b.append(cur[0])
                out_a.append(cur[1])
    return out_b[:8], out_a[:8]


def make_entry(mirror_root: Path, repo: str, commit: str, path: str, labels: list[str], neg: bool,
               note: str) -> dict:
    gd = git_dir(mirror_root, repo)
    after = git(gd, "rev-parse", commit).decode().strip()
    before = git(gd, "rev-parse", f"{after}^").decode().strip()
    b, a = git(gd, "show", f"{before}:{path}"), git(gd, "show", f"{after}:{path}")
    message = git(gd, "log", "-1", "--format=%s", after).decode("utf-8", "replace").strip()[:160]
    lb, la = hunk_lines(gd, before, after, path, labels)
    merged = subprocess.run(["git", f"--git-dir={gd}", "merge-base", "--is-ancestor", after, "HEAD"],
                            capture_output=True).returncode == 0
    return {"repo": repo, "path": path, "before": before, "after": after, "message": message,
            "labels": labels, "after_negative": neg, "framework": framework(b.decode("utf-8", "replace")),
            "kind": "author-fix", "url": f"https://github.com/{repo}/commit/{after}",
            "sha256_before": hashlib.sha256(b).hexdigest(), "sha256_after": hashlib.sha256(a).hexdigest(), "on_default_branch": merged,
            "lines_before": lb, "lines_after": la, "split": half(repo), "note": note}


def free_id(rows: list[dict], prefix: str, first: int) -> str:
    """The first ``prefix`` + 4-digit id numbered ``first`` or more that no row holds."""
    used, n = {r["id"] for r in rows}, first
    while f"{prefix}{n:04d}" in used:
        n += 1
    return f"{prefix}{n:04d}"


def load(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("decisions", type=Path)
    ap.add_argument("--mirror-root", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--first-id", type=int, default=1, help="new ids from this number on (parallel labellers)")
    args = ap.parse_args()
    entries, excluded = load(LABELS), load(EXCLUDED)
    have = {(e["repo"], e["after"], e["path"]) for e in entries + excluded}
    for line in args.decisions.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        repo, commit, path, labels, decision, neg, note = (line.split("\t") + [""] * 7)[:7]
        gd = git_dir(args.mirror_root, repo)
        full = git(gd, "rev-parse", commit).decode().strip()
        if (repo, full, path) in have:
            continue
        have.add((repo, full, path))
        e = make_entry(args.mirror_root, repo, full, path, labels.split(","), neg.strip() == "y", note.strip())
        if decision.strip() == "accept":
            e["id"] = free_id(entries, "a", args.first_id)
            entries.append(e)
        else:
            e["id"] = free_id(excluded, "x", args.first_id)
            e["kind"], e["reason"] = "excluded", e.pop("note")
            excluded.append(e)
    for path, rows in ((LABELS, entries), (EXCLUDED, excluded)):
        path.write_text("".join(json.dumps({"id": r.pop("id"), **r}) + "\n" for r in rows))
    print(f"{len(entries)} labelled entries, {len(excluded)} excluded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
