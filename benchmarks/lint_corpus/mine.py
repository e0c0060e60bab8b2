"""Find candidate fix commits for the author-labelled lint corpus in a fetched bare mirror (a reviewer decides).

Run: python benchmarks/lint_corpus/mine.py GIT_DIR REPO [--out FILE] [--per-file]

Scans every commit's diff for added or removed lines with a pitfall's fix token (``PICKAXE``), then keeps a
(commit, file) pair when the file before the commit shows the pitfall's preconditions and lacks the fix, and
the file after has it (``SPECS``). It only proposes: every candidate is read (commit message and diff) before
it becomes a label in ``author_labels.jsonl``; a rename, a reformat or a file that was not yet distributed is
excluded there with the reason.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

DIST = re.compile(r"DistributedDataParallel|init_process_group|\bDDP\(|FullyShardedDataParallel|\bFSDP\(")
STRAT = re.compile(r"Strateg(y|ies)\(|tf\.distribute\.")
GUARD = re.compile(r"rank\s*==\s*0|rank\s*in\s*[\[({]\s*-1,\s*0|is_main_process|is_master|main_process|"
                   r"rank\s*<=\s*0|get_rank\(\)\s*==\s*0|is_local_main_process|global_zero")
DP = re.compile(r"(?<!Distributed)DataParallel\(")
ONE_GPU = re.compile(r"CUDA_VISIBLE_DEVICES['\"]?\]?\s*=\s*['\"]\d['\"]|set_visible_devices\(")


def guarded_saves(text: str) -> tuple[int, int]:
    """(torch.save lines with a rank guard on them or in the 6 lines before, those without)."""
    lines = text.splitlines()
    g = u = 0
    for i, line in enumerate(lines):
        if "torch.save(" in line and not line.lstrip().startswith("#"):
            if any(GUARD.search(x) for x in lines[max(0, i - 6):i + 1]):
                g += 1
            else:
                u += 1
    return g, u


def n(pat, text):
    return len(re.findall(pat, text)) if isinstance(pat, str) else len(pat.findall(text))


def added(tok, b, a):
    return n(tok, b) == 0 and n(tok, a) > 0


SPECS = {
    "PT001": lambda b, a: n(DP, b) > n(DP, a) and "DistributedDataParallel" in a,
    "PT002": lambda b, a: bool(DIST.search(b)) and n(r"cuda:0|\.cuda\(\)", b) > n(r"cuda:0|\.cuda\(\)", a)
    and n(r"local_rank|LOCAL_RANK|set_device", a) > n(r"local_rank|LOCAL_RANK|set_device", b),
    "PT003": lambda b, a: bool(DIST.search(b)) and "DataLoader" in b and added("DistributedSampler", b, a),
    "PT004": lambda b, a: "DistributedSampler" in b and added(r"set_epoch\(", b, a),
    "PT005": lambda b, a: "DataLoader(" in b and "backward" in b and added("num_workers", b, a),
    "PT006": lambda b, a: bool(DIST.search(b)) and added("no_sync", b, a),
    "PT007": lambda b, a: bool(DIST.search(b)) and guarded_saves(b)[1] > guarded_saves(a)[1]
    and guarded_saves(a)[0] > guarded_saves(b)[0],
    "PT008": lambda b, a: bool(DIST.search(b)) and added("SyncBatchNorm", b, a),
    "PT009": lambda b, a: "init_process_group" in b and not DIST.sub("", b).count("DistributedDataParallel")
    and not re.search(r"DistributedDataParallel|\bDDP\(|FullyShardedDataParallel|\bFSDP\(", b)
    and bool(re.search(r"DistributedDataParallel|\bDDP\(|FullyShardedDataParallel|\bFSDP\(", a)),
    "PT010": lambda b, a: n(ONE_GPU, b) > n(ONE_GPU, a) and "torch" in b,
    "PT011": lambda b, a: "torch.load(" in b and added(r"weights_only\s*=\s*True", b, a),
    "TF001": lambda b, a: bool(STRAT.search(b)) and n(r"\.scope\(\)", a) > n(r"\.scope\(\)", b),
    "TF002": lambda b, a: bool(STRAT.search(a)) and n(r"tf\.device\(", b) > n(r"tf\.device\(", a),
    "TF003": lambda b, a: n(ONE_GPU, b) > n(ONE_GPU, a) and "tensorflow" in b,
    "TF004": lambda b, a: bool(STRAT.search(b)) and added(r"experimental_distribute_dataset|distribute_datasets_from_function", b, a),
    "TF005": lambda b, a: bool(STRAT.search(b)) and added(r"\.run\(|experimental_run_v2", b, a),
    "TF006": lambda b, a: bool(STRAT.search(b)) and added(r"compute_average_loss|Reduction\.NONE", b, a),
    "TF007": lambda b, a: bool(STRAT.search(b)) and added("num_replicas_in_sync", b, a),
    "TF008": lambda b, a: ("tf.data" in b or "from_tensor_slices" in b) and added(r"\.prefetch\(", b, a),
    "TF009": lambda b, a: ("tf.data" in b or "from_tensor_slices" in b) and ".map(" in b
    and n("num_parallel_calls", a) > n("num_parallel_calls", b),
    "TF011": lambda b, a: bool(re.search(r"\.run\(|experimental_run_v2", b)) and STRAT.search(b) is not None
    and n(r"tf\.function", a) > n(r"tf\.function", b),
}
PICKAXE = ("DistributedSampler|set_epoch|no_sync|SyncBatchNorm|DataParallel|num_workers|weights_only|"
           "CUDA_VISIBLE_DEVICES|set_visible_devices|scope\\(\\)|num_replicas_in_sync|prefetch|num_parallel_calls|"
           "distribute_dataset|experimental_run_v2|compute_average_loss|Reduction.NONE|tf.function|tf.device|"
           "local_rank|LOCAL_RANK|set_device|rank *== *0|is_main_process|main_process|is_master|torch.save|"
           "init_process_group|strategy.run")


def git(gd, *args):
    p = subprocess.run(["git", f"--git-dir={gd}", *args], capture_output=True, timeout=1200)
    return p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None


def changed_paths(gd: str, parent: str, sha: str) -> list[str]:
    """Files modified by the commit whose added or removed lines touch a fix token (``PICKAXE``)."""
    for specs in (("*.py", "*.ipynb"), ("*.py",)):
        diff = git(gd, "diff", "--no-renames", "-U0", "--diff-filter=M", parent, sha, "--", *specs)
        if diff is not None:
            break
    else:
        return []  # a blob is missing from the snapshot (files of 4 MiB and more are left out)
    paths, path, token = [], None, re.compile(PICKAXE)
    for line in diff.splitlines():
        if line.startswith("+++ b/"):
            path = line[6:]
        elif path and line[:1] in "+-" and not line.startswith(("+++", "---")) and token.search(line):
            if path not in paths:
                paths.append(path)
    return paths


def candidates(gd: str, repo: str, since: str | None = None, paths: tuple[str, ...] = ("*.py", "*.ipynb")):
    args = ["log", "--all", "--no-merges", "--format=%H%x09%P%x09%s"]
    if since:
        args.append(f"--since={since}")
    # fast: let git find the commits whose diff touches a token; a blob missing from the snapshot (files of
    # 4 MiB and more, mostly notebooks with outputs) makes `git log -G` fail: then .py only, then every commit
    py = tuple(p for p in paths if not p.endswith(".ipynb"))
    out = (git(gd, *args, "-G", PICKAXE, "--", *paths) or git(gd, *args, "-G", PICKAXE, "--", *py)
           or git(gd, *args, "--", *py) or "")
    seen = set()
    for line in out.splitlines():
        sha, parents, subject = (line.split("\t", 2) + ["", ""])[:3]
        if not parents or sha in seen:
            continue
        seen.add(sha)
        parent = parents.split()[0]
        for path in changed_paths(gd, parent, sha):
            b, a = git(gd, "show", f"{parent}:{path}"), git(gd, "show", f"{sha}:{path}")
            if not b or not a:
                continue
            rules = [rid for rid, test in SPECS.items() if test(b, a)]
            if rules:
                yield {"repo": repo, "path": path, "before": parent, "after": sha, "message": subject[:200],
                       "rules": rules}


def notebook_code(path: str, text: str) -> str:
    """A notebook's code cells joined (the SPECS read code, not outputs); other files unchanged."""
    if not path.endswith(".ipynb"):
        return text
    try:
        nb = json.loads(text)
    except ValueError:
        return text
    cells = nb.get("cells") or (nb.get("worksheets") or [{}])[0].get("cells", [])
    srcs = [c.get("source", c.get("input", "")) for c in cells if c.get("cell_type") == "code"]
    return "\n".join("".join(s) if isinstance(s, list) else s for s in srcs)


def per_file_candidates(gd: str, repo: str, grep: str = "Strategy|num_replicas_in_sync"):
    """Like ``candidates`` but file by file: each .py/.ipynb that matches ``grep`` at HEAD, every consecutive pair of
    its versions. Slower, but a snapshot that lacks a large notebook blob (which makes ``git log -G`` fail, so
    ``candidates`` falls back to .py files) still has its other notebook versions compared."""
    listed = git(gd, "grep", "-l", "-I", "-E", grep, "HEAD", "--", "*.py", "*.ipynb") or ""
    for path in sorted({x.split(":", 1)[1] for x in listed.splitlines() if ":" in x}):
        for line in (git(gd, "log", "--all", "--format=%H %P%x09%s", "--", path) or "").splitlines():
            shas, _, subject = line.partition("\t")
            parts = shas.split()
            if len(parts) < 2:
                continue
            b, a = git(gd, "show", f"{parts[1]}:{path}"), git(gd, "show", f"{parts[0]}:{path}")
            if not b or not a:
                continue  # a version whose blob the snapshot lacks
            b, a = notebook_code(path, b), notebook_code(path, a)
            rules = [rid for rid, test in SPECS.items() if test(b, a)]
            if rules:
                yield {"repo": repo, "path": path, "before": parts[1], "after": parts[0], "message": subject[:200],
                       "rules": rules}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("repo")
    ap.add_argument("--since")
    ap.add_argument("--out", default="-")
    ap.add_argument("--paths", nargs="*", default=["*.py", "*.ipynb"], help="git pathspecs to scan")
    ap.add_argument("--per-file", action="store_true", help="compare each strategy file's versions one by one "
                    "(notebooks as their code cells; for snapshots that lack large blobs)")
    args = ap.parse_args()
    fh = sys.stdout if args.out == "-" else open(args.out, "w")
    found = per_file_candidates(args.git_dir, args.repo) if args.per_file else \
        candidates(args.git_dir, args.repo, args.since, tuple(args.paths))
    for c in found:
        fh.write(json.dumps(c) + "\n")
        fh.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
