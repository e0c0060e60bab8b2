"""Rebuild the author-labelled lint corpus (benchmarks/lint_corpus/author_labels.jsonl) into a cache folder.

Run: python benchmarks/lint_corpus_build.py [--cache DIR] [--mirror-root DIR] [--offline] [--force] [--single]

Every entry names a file in a public repository at two commits: ``before`` (the parent of the authors' fixing
commit: a positive for the entry's labels) and ``after`` (the fixing commit: a negative for them). Each version
is read from a local bare git mirror (``MIRROR_ROOT/owner+name/<git dir>``, as the ``fetch`` tool leaves them,
``git show COMMIT:PATH``), else downloaded from ``raw.githubusercontent.com`` (unless ``--offline``), and kept
only when its sha256 equals the recorded one. Files land in ``CACHE/<id>/before/<name>`` and
``CACHE/<id>/after/<name>`` (single-file mode), and again inside a copy of its project at the same commit,
``CACHE/<id>/tree-<version>/<path>`` (project-context mode: the file's folder and the project modules its imports
resolve to, ``lint_corpus/project_tree.py``; what was taken is listed with sha256 in
``CACHE/<id>/tree-<version>.json``), since `allgpu lint` follows helpers into those modules as it does on a user's
repository. The project tree needs the mirror; without one the entry stays single-file (reported). The
thread-confirmed rows that label a repository file (``thread_labels.jsonl``: ``path`` at ``commit``) get the same
tree, in ``~/.cache/allgpu-lint-corpus/thread-trees/<id>/<path>`` (their texts stay in the thread cache). ``--single``
builds only the single-file copies. Nothing of them is ever committed. An entry that cannot be had is skipped
with the reason; the script never stops on one. Exit code 0 when every entry is complete, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lint_corpus"))
from fetch import DEFAULT_MIRRORS, _git_dirs, from_github, from_mirror  # noqa: E402
from project_tree import DEPTH, LAYOUT, project_files  # noqa: E402

HERE = Path(__file__).resolve().parent
LABELS = HERE / "lint_corpus" / "author_labels.jsonl"
DEFAULT_CACHE = Path.home() / ".cache" / "allgpu-lint-corpus" / "author"
THREADS = HERE / "lint_corpus" / "thread_labels.jsonl"
THREAD_TREES = Path.home() / ".cache" / "allgpu-lint-corpus" / "thread-trees"
VERSIONS = ("before", "after")


def read_entries(path: Path = LABELS) -> list[dict]:
    """The entries of ``author_labels.jsonl`` (one JSON object a line; blank lines skipped)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def cached_file(cache: Path, entry: dict, version: str) -> Path:
    """Where ``entry``'s ``version`` ("before" or "after") lives in the cache."""
    return cache / entry["id"] / version / Path(entry["path"]).name


def project_file(cache: Path, entry: dict, version: str) -> Path:
    """Where ``entry``'s ``version`` lives inside its project's tree in the cache (project-context mode)."""
    return cache / entry["id"] / f"tree-{version}" / entry["path"]


def manifest_file(cache: Path, entry: dict, version: str) -> Path:
    """The record of what the project tree of ``entry``'s ``version`` holds."""
    return cache / entry["id"] / f"tree-{version}.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _get(entry: dict, version: str, mirror_root: Path, network: bool) -> tuple[bytes | None, str]:
    row = {"repo": entry["repo"], "path": entry["path"], "commit": entry[version]}
    data, where = from_mirror(mirror_root, row), "mirror"
    if data is None and network:
        data, where = from_github(row), "download"
    if data is None:
        return None, f"{version} {entry[version][:10]}: no mirror of {entry['repo']} under {mirror_root}" + \
            ("" if network else " (offline)") + " and no download"
    if sha256(data) != entry[f"sha256_{version}"]:
        return None, f"{version} {entry[version][:10]}: sha256 from the {where} differs from the recorded one"
    return data, ""


def write_tree(root: Path, manifest: Path, repo: str, commit: str, path: str, data: bytes, mirror_root: Path,
               force: bool = False) -> str:
    """Put ``data`` (the checked labelled file) at ``root/path`` inside a copy of its project at ``commit``
    (``project_tree.project_files``) and list what was taken in ``manifest``; returns why not, or ""."""
    dest = root / path
    if manifest.is_file() and dest.is_file() and not force and \
            (m := json.loads(manifest.read_text(encoding="utf-8"))).get("depth") == DEPTH and m.get("layout", 1) == LAYOUT:
        return ""
    gds = _git_dirs(mirror_root, repo)
    if not gds:
        return f"no mirror of {repo}, single-file only"
    try:
        files = project_files(gds[0], commit, path, data)
    except (RuntimeError, OSError, ValueError) as exc:
        return f"project tree not read ({exc}), single-file only"
    if root.exists():
        shutil.rmtree(root)
    for rel, blob in {**files, path: data}.items():
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"repo": repo, "commit": commit, "labelled": path, "depth": DEPTH, "layout": LAYOUT, "files": {
        rel: sha256(blob) for rel, blob in sorted(files.items())}}, indent=1) + "\n", encoding="utf-8")
    return ""


def _build_tree(entry: dict, version: str, data: bytes, cache: Path, mirror_root: Path, force: bool) -> str:
    why = write_tree(cache / entry["id"] / f"tree-{version}", manifest_file(cache, entry, version), entry["repo"],
                     entry[version], entry["path"], data, mirror_root, force)
    return f"{version}: {why}" if why else ""


def thread_tree_file(trees: Path, row: dict) -> Path:
    """Where a thread row's repository file lives inside its project's tree (project-context mode)."""
    return trees / row["id"] / row["path"]


def build_thread_trees(rows: list[dict], trees: Path = THREAD_TREES, mirror_root: Path = DEFAULT_MIRRORS,
                       force: bool = False) -> list[str]:
    """Project trees for the thread-confirmed rows that label a repository file (``path`` at ``commit``), the
    file checked against the row's sha256; returns ``"id (why)"`` per such row left single-file. Rows of code
    pasted in a thread have no project and are not listed."""
    alone = []
    for row in rows:
        if not (row.get("path") and row.get("commit") and row.get("repo")):
            continue
        gds = _git_dirs(mirror_root, row["repo"])
        data = from_mirror(mirror_root, {"repo": row["repo"], "path": row["path"], "commit": row["commit"]}) \
            if gds else None
        if data is None:
            alone.append(f"{row['id']} (no mirror of {row['repo']} with {row['commit'][:10]}:{row['path']})")
            continue
        if sha256(data) != row["sha256"]:
            alone.append(f"{row['id']} (the file at its commit differs in bytes from the cached text's sha256, "
                         "e.g. CRLF line ends)")
            continue
        why = write_tree(trees / row["id"], trees / f"{row['id']}.json", row["repo"], row["commit"], row["path"],
                         data, mirror_root, force)
        if why:
            alone.append(f"{row['id']} ({why})")
    return alone


def build(entries: list[dict], cache: Path, mirror_root: Path = DEFAULT_MIRRORS, network: bool = True,
          force: bool = False, project: bool = True) -> tuple[list[str], list[str]]:
    """Bring both versions of every entry into ``cache`` (and, with ``project``, into a copy of its project);
    returns ``"id repo:path (why)"`` per entry skipped, and per entry left single-file."""
    skipped, single = [], []
    for entry in entries:
        reasons, alone = [], []
        for version in VERSIONS:
            dest = cached_file(cache, entry, version)
            if dest.is_file() and not force and sha256(dest.read_bytes()) == entry[f"sha256_{version}"]:
                data = dest.read_bytes()
            else:
                data, why = _get(entry, version, mirror_root, network)
                if data is None:
                    reasons.append(why)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            why = _build_tree(entry, version, data, cache, mirror_root, force) if project else ""
            if why:
                alone.append(why)
        if reasons:
            skipped.append(f"{entry['id']} {entry['repo']}:{entry['path']} ({'; '.join(reasons)})")
        if alone:
            single.append(f"{entry['id']} {entry['repo']}:{entry['path']} ({'; '.join(alone)})")
    return skipped, single


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=Path, default=LABELS)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--mirror-root", type=Path, default=DEFAULT_MIRRORS)
    ap.add_argument("--offline", action="store_true", help="mirrors only, no download")
    ap.add_argument("--force", action="store_true", help="rebuild files already in the cache")
    ap.add_argument("--single", action="store_true", help="only the single-file copies, no project trees")
    ap.add_argument("--thread-trees", type=Path, default=THREAD_TREES,
                    help="where the thread-confirmed repository files' project trees go")
    args = ap.parse_args()
    entries = read_entries(args.labels)
    skipped, single = build(entries, args.cache, args.mirror_root, network=not args.offline, force=args.force,
                            project=not args.single)
    print(f"{len(entries) - len(skipped)}/{len(entries)} entries (both versions) in {args.cache}"
          + ("" if args.single else f"; {len(entries) - len(skipped) - len(single)} with their project tree"))
    for s in skipped:
        print(f"  skipped: {s}")
    for s in single:
        print(f"  single-file only: {s}")
    if not args.single:
        threads = read_entries(THREADS)
        alone = build_thread_trees(threads, args.thread_trees, args.mirror_root, args.force)
        files = sum(1 for r in threads if r.get("path"))
        print(f"thread-confirmed rows: {files - len(alone)}/{files} repository files with their project tree in "
              f"{args.thread_trees} ({len(threads) - files} pasted snippets have none)")
        for s in alone:
            print(f"  single-file only: {s}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
