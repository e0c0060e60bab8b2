"""Texts others wrote (pasted logs, code quoted in threads), cached outside the repository and checked by sha256.

The ground-truth files commit only references, labels and each text's sha256; the texts live in a cache folder,
one ``<id><suffix>`` a row. ``doctor_log_cache.py`` (logs users pasted) and ``lint_corpus/thread_cache.py`` (code a
thread settles) keep their own folders, rows and split rules and share what is here: hashing, reading the rows,
checking a cache against them, and the stage files a collector writes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def sha256(text: str) -> str:
    """The hex sha256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_rows(path: Path) -> list[dict]:
    """The committed JSON-lines rows of ``path``; ``[]`` when the file does not exist yet."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` to ``path`` as JSON lines (UTF-8, non-ASCII kept as is)."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def check(rows: list[dict], directory: Path, suffix: str) -> tuple[dict[str, Path], list[str], list[str]]:
    """``(found, missing, differ)``: ``{id: path}`` of the cached texts matching their row's sha256, the ids
    without a file, and the ids whose file does not match."""
    found, missing, differ = {}, [], []
    for row in rows:
        path = directory / f"{row['id']}{suffix}"
        if not path.is_file():
            missing.append(row["id"])
        elif sha256(path.read_text(encoding="utf-8")) != row["sha256"]:
            differ.append(row["id"])
        else:
            found[row["id"]] = path
    return found, missing, differ


def incomplete(what: str, directory: Path, total: int, missing: list[str], differ: list[str], fix: str,
               texts: str = "texts") -> str:
    """The message for a cache that lacks ``texts`` or holds changed ones, naming some of each and ``fix``."""
    def some(ids: list[str]) -> str:
        return ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")

    return (f"the {what} cache at {directory} is incomplete: {len(missing)} of {total} {texts} missing"
            + (f" ({some(missing)})" if missing else "")
            + (f", {len(differ)} not matching their sha256 ({some(differ)})" if differ else "") + f". {fix}")


def parse_stage(path: Path) -> tuple[dict, str]:
    """A collector's stage file: ``key: value`` lines, a ``---`` line, then the text exactly as written."""
    head, _, text = path.read_text(encoding="utf-8").partition("\n---\n")
    return dict(line.split(": ", 1) for line in head.splitlines() if line.strip()), text
