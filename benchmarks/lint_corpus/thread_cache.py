"""The thread-confirmed lint labels (``thread_labels.jsonl``) and the cache of the code they label: add, verify, load.

A thread-confirmed label is code that a user pasted in a public thread (an issue, a forum or Q&A question) where
someone other than us named the pitfall in that code: a maintainer, an answerer, or the user confirming that the
named fix worked (issue 21: "a maintainer's or answerer's reply in a public thread that names the pitfall in that
code"). A snippet the reply says is correct (often the answerer's corrected code) is a negative for the labels in
its ``negatives``. The code is either pasted in the thread (``code_in`` names the comment) or a file of the
thread's repository that the thread discusses (``path`` and ``commit``: the version current when the thread was
written; ``git show COMMIT:PATH`` rebuilds it). The repository commits only the reference (URL, which comment holds the code, who settled it),
the labels, the sha256 and line count of the code, and the split; the code itself is never committed (it is others'
text). It lives in a cache outside the repository, ``$ALLGPU_LINT_THREAD_CACHE`` (default
``~/.cache/allgpu-lint-corpus/threads``), one ``<id>.py`` a snippet; :func:`load` checks every sha256 and stops
naming what is missing. Pasted texts were copied from the stored copies of the threads that the project's search
tool serves; to rebuild the cache elsewhere, open each URL, copy the code block named in ``code_in`` (or
``git show COMMIT:PATH`` for a repository file) into ``<id>.py`` and run ``verify``.

    python benchmarks/lint_corpus/thread_cache.py verify       # every snippet present and matching its sha256
    python benchmarks/lint_corpus/thread_cache.py add STAGE_DIR  # (labeller) stage files -> cache + rows

A stage file ``<id>.txt`` is ``key: value`` lines (url, repo or site, thread, code_in, path and commit for a
repository file, settled_by, settled_ref, labels, negatives, framework, note), a ``---`` line, then the code exactly as quoted.

Split: by repository for GitHub threads (``author_split.half(owner/name)``, the author-fix corpus's coin, so a
repository is in the same half in both corpora), by ``site/thread`` elsewhere; fixed by the seed, never chosen.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from author_split import half  # noqa: E402
from text_cache import check, incomplete, parse_stage, read_rows as _read_rows, sha256, write_rows  # noqa: E402

THREADS = HERE / "thread_labels.jsonl"
FIELDS = ("url", "repo", "site", "thread", "code_in", "path", "commit", "settled_by", "settled_ref", "framework", "note")
SETTLED_BY = ("maintainer", "answerer", "user-confirmed")


class ThreadCacheError(RuntimeError):
    """The snippet cache is missing texts, or holds texts that do not match their sha256."""


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "allgpu-lint-corpus" / "threads"
    return Path(os.environ.get("ALLGPU_LINT_THREAD_CACHE", default))


def split_key(row: dict) -> str:
    """What the split coin is tossed on: ``owner/name`` for a GitHub thread, ``site/thread`` otherwise."""
    return row["repo"] if row.get("repo") else f"{row['site']}/{row['thread']}"


def read_rows(path: Path = THREADS) -> list[dict]:
    """The committed rows (references, labels, sha256, split); ``[]`` when the file does not exist yet."""
    return _read_rows(path)


def load(rows: list[dict], directory: Path | None = None) -> dict[str, Path]:
    """``{id: path of the cached snippet}`` for every row, each text checked against its sha256.

    Raises:
        ThreadCacheError: naming the directory, the ids missing or not matching, and how to rebuild them.
    """
    directory = directory or cache_dir()
    paths, missing, differ = check(rows, directory, ".py")
    if missing or differ:
        raise ThreadCacheError(incomplete(
            "thread snippet", directory, len(rows), missing, differ,
            "The snippets are not committed (they are others' code): copy the code block named in each row's "
            "code_in from its url into <id>.py, or point ALLGPU_LINT_THREAD_CACHE at a built cache.", texts="snippets"))
    return paths


def _labels(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


def add(stage: Path, path: Path = THREADS, directory: Path | None = None) -> int:
    """Stage files -> cache texts + rows (a row already there keeps its place and values). Returns rows added."""
    rows = read_rows(path)
    known = {r["id"] for r in rows}
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    added = 0
    for file in sorted(stage.glob("t*.txt")):
        meta, text = parse_stage(file)
        (directory / f"{file.stem}.py").write_text(text, encoding="utf-8")
        if file.stem in known:
            continue
        if meta.get("settled_by") not in SETTLED_BY:
            raise ValueError(f"{file}: settled_by must be one of {SETTLED_BY}")
        row = {"id": file.stem, **{k: meta.get(k, "") for k in FIELDS}, "labels": _labels(meta.get("labels", "")),
               "negatives": _labels(meta.get("negatives", "")), "kind": "thread", "sha256": sha256(text),
               "lines": len(text.splitlines())}
        row["split"] = half(split_key(row))
        rows.append(row)
        added += 1
    write_rows(path, rows)
    return added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("verify")
    a = sub.add_parser("add")
    a.add_argument("stage", type=Path)
    args = parser.parse_args()
    if args.cmd == "add":
        print(f"{add(args.stage)} rows added")
        return 0
    rows = read_rows()
    try:
        paths = load(rows)
    except ThreadCacheError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(paths)} thread snippets present, every sha256 matches ({cache_dir()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
