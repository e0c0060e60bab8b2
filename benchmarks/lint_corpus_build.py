"""Rebuild the author-labelled lint corpus (benchmarks/lint_corpus/author_labels.jsonl) into a cache folder.

Run: python benchmarks/lint_corpus_build.py [--cache DIR] [--mirror-root DIR] [--offline] [--force]

Every entry names a file in a public repository at two commits: ``before`` (the parent of the authors' fixing
commit: a positive for the entry's labels) and ``after`` (the fixing commit: a negative for them). Each version
is read from a local bare git mirror (``MIRROR_ROOT/owner+name/<git dir>``, as the ``fetch`` tool leaves them,
``git show COMMIT:PATH``), else downloaded from ``raw.githubusercontent.com`` (unless ``--offline``), and kept
only when its sha256 equals the recorded one. Files land in ``CACHE/<id>/before/<name>`` and
``CACHE/<id>/after/<name>``; nothing of them is ever committed. An entry that cannot be had is skipped with
the reason; the script never stops on one. Exit code 0 when every entry is complete, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lint_corpus"))
from fetch import DEFAULT_MIRRORS, from_github, from_mirror  # noqa: E402

HERE = Path(__file__).resolve().parent
LABELS = HERE / "lint_corpus" / "author_labels.jsonl"
DEFAULT_CACHE = Path.home() / ".cache" / "allgpu-lint-corpus" / "author"
VERSIONS = ("before", "after")


def read_entries(path: Path = LABELS) -> list[dict]:
    """The entries of ``author_labels.jsonl`` (one JSON object a line; blank lines skipped)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def cached_file(cache: Path, entry: dict, version: str) -> Path:
    """Where ``entry``'s ``version`` ("before" or "after") lives in the cache."""
    return cache / entry["id"] / version / Path(entry["path"]).name


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


def build(entries: list[dict], cache: Path, mirror_root: Path = DEFAULT_MIRRORS, network: bool = True,
          force: bool = False) -> list[str]:
    """Bring both versions of every entry into ``cache``; returns ``"id repo:path (why)"`` per entry skipped."""
    skipped = []
    for entry in entries:
        reasons = []
        for version in VERSIONS:
            dest = cached_file(cache, entry, version)
            if dest.is_file() and not force and sha256(dest.read_bytes()) == entry[f"sha256_{version}"]:
                continue
            data, why = _get(entry, version, mirror_root, network)
            if data is None:
                reasons.append(why)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        if reasons:
            skipped.append(f"{entry['id']} {entry['repo']}:{entry['path']} ({'; '.join(reasons)})")
    return skipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=Path, default=LABELS)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--mirror-root", type=Path, default=DEFAULT_MIRRORS)
    ap.add_argument("--offline", action="store_true", help="mirrors only, no download")
    ap.add_argument("--force", action="store_true", help="rebuild files already in the cache")
    args = ap.parse_args()
    entries = read_entries(args.labels)
    skipped = build(entries, args.cache, args.mirror_root, network=not args.offline, force=args.force)
    print(f"{len(entries) - len(skipped)}/{len(entries)} entries (both versions) in {args.cache}")
    for s in skipped:
        print(f"  skipped: {s}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
