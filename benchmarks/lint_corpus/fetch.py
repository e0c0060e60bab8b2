"""Rebuild the lint corpus files (corpus.tsv) at their recorded commits into a cache folder outside the project.

Run: python benchmarks/lint_corpus/fetch.py [--cache DIR] [--mirror-root DIR] [--tsv FILE] [--force]

Each file comes from a local bare git mirror when one exists (``MIRROR_ROOT/owner+name/<git dir>``, read with
``git show COMMIT:PATH``), else from ``https://raw.githubusercontent.com/{repo}/{commit}/{path}``. A file that
cannot be had is reported and skipped; the script never stops on one. Files land in ``CACHE/<id>/<basename>``.
Exit code 0 when every file is present afterwards, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path.home() / ".cache" / "allgpu-lint-corpus"
DEFAULT_MIRRORS = Path("/work/.mirror")
RAW = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def read_corpus(tsv: Path) -> list[dict[str, str]]:
    """The rows of ``corpus.tsv`` as dicts keyed by the header (missing trailing fields become "")."""
    with tsv.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [{k: (v or "") for k, v in row.items() if k is not None} for row in reader if row.get("id")]


def cached_path(cache: Path, row: dict[str, str]) -> Path:
    """Where ``row``'s file lives in the cache: ``CACHE/<id>/<basename of path>``."""
    return cache / row["id"] / Path(row["path"]).name


def _git_dirs(mirror_root: Path, repo: str) -> list[Path]:
    base = mirror_root / repo.replace("/", "+")
    if not base.is_dir():
        return []
    if (base / "HEAD").is_file():
        return [base]
    # ``owner+name/repo`` (bare) or ``owner+name/repo/.git``
    return sorted({p.parent for pattern in ("*/HEAD", "*/.git/HEAD") for p in base.glob(pattern)})


def from_mirror(mirror_root: Path, row: dict[str, str]) -> bytes | None:
    """The file's bytes at its commit from a local bare mirror, or None."""
    for gd in _git_dirs(mirror_root, row["repo"]):
        proc = subprocess.run(["git", f"--git-dir={gd}", "show", f"{row['commit']}:{row['path']}"],
                              capture_output=True, timeout=60)
        if proc.returncode == 0:
            return proc.stdout
    return None


def from_github(row: dict[str, str], timeout: float = 30.0) -> bytes | None:
    """The file's bytes from raw.githubusercontent.com at its commit, or None (no network, 404...)."""
    url = RAW.format(repo=row["repo"], commit=row["commit"], path=row["path"])
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (fixed https host)
            return resp.read()
    except (urllib.error.URLError, OSError, ValueError):
        return None


def fetch_all(rows: list[dict[str, str]], cache: Path, mirror_root: Path, force: bool = False,
              network: bool = True) -> list[str]:
    """Bring every row's file into ``cache``; returns ``"id repo:path (why)"`` for each one not obtained."""
    missing = []
    for row in rows:
        dest = cached_path(cache, row)
        if dest.is_file() and not force:
            continue
        data = from_mirror(mirror_root, row)
        if data is None and network:
            data = from_github(row)
        if data is None:
            missing.append(f"{row['id']} {row['repo']}:{row['path']}@{row['commit'][:10]} (no mirror, no download)")
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tsv", type=Path, default=HERE / "corpus.tsv")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--mirror-root", type=Path, default=DEFAULT_MIRRORS)
    ap.add_argument("--force", action="store_true", help="fetch again files already in the cache")
    ap.add_argument("--offline", action="store_true", help="mirrors only, no download")
    args = ap.parse_args()
    rows = read_corpus(args.tsv)
    missing = fetch_all(rows, args.cache, args.mirror_root, args.force, network=not args.offline)
    print(f"{len(rows) - len(missing)}/{len(rows)} corpus files in {args.cache}")
    for m in missing:
        print(f"  not fetched: {m}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
