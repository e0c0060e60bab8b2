"""The cache of pasted logs behind ``benchmarks/doctor_logs/real_threads.jsonl``: build, verify, locate.

The ground truth of ``allgpu doctor --log`` is logs that users pasted in public issue threads whose thread settles
the cause (a maintainer's or answerer's reply, or the user confirming a fix). The repository commits only the
reference (repository, issue, which comment holds the log), the settled cause, who settled it with a short quote
reference, and the sha256 of the extracted log text; the pasted text itself is never committed.

The texts were extracted from the stored copies of the threads that the project's search tool serves; that tool is
not reachable from a script, so the cache cannot be rebuilt offline from the references alone. The cache lives
outside the repository (``$ALLGPU_DOCTOR_LOG_CACHE``, default ``~/.cache/allgpu/doctor_logs``), one
``<id>.log`` a case; :func:`load` checks every sha256 and fails naming what is missing. To rebuild it elsewhere,
open each thread at its URL, copy the comment named in ``log_in`` and check the sha256 with ``verify``.

    python benchmarks/doctor_log_cache.py verify            # every case present and matching its sha256
    python benchmarks/doctor_log_cache.py add STAGE_DIR [--round N]  # (collector) stage files -> cache + rows

Rounds: round 1 was split by thread into tuning and held-out halves; its held-out figure was recorded, then its
misses were tuned on too (docs/doctor.md keeps the figure). Every later round is collected after the rules are
frozen and is held out whole: its logs are never run through the doctor before the evaluation that reports them.
From round 4 on, each thread's row also carries the half the salted hash gives it (``split_of``), so that once the
round has been scored whole, only its tuning half may be tuned on and its held-out half stays held out.

A stage file is ``key: value`` lines (repo, issue, log_in, cause, settled_by, settled_ref), a ``---`` line, then
the log text exactly as pasted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from text_cache import check, incomplete, parse_stage, read_rows, sha256, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent / "doctor_logs"
REFERENCES = HERE / "real_threads.jsonl"
# Split once at random by thread, before any rule change: a thread's salted hash decides its half, so a thread
# added later lands in a half nobody chose.
SPLIT_SALT = "allgpu-doctor-real-pastes-2026-11-24"


def cache_dir() -> Path:
    return Path(os.environ.get("ALLGPU_DOCTOR_LOG_CACHE", Path.home() / ".cache" / "allgpu" / "doctor_logs"))


def split_of(repo: str, issue: int) -> str:
    """``tuning`` or ``held-out`` for a thread (every log of a thread in the same half)."""
    digest = hashlib.sha256(f"{SPLIT_SALT}:{repo.lower()}#{issue}".encode()).digest()
    return "tuning" if digest[0] % 2 == 0 else "held-out"


def references(path: Path = REFERENCES) -> list[dict]:
    """The committed rows: references, labels, sha256, split."""
    return read_rows(path)


class CacheError(RuntimeError):
    """The cache is missing texts or holds texts that do not match their sha256."""


def load(rows: list[dict], directory: Path | None = None) -> dict[str, str]:
    """``{id: text}`` for every row, each text checked against its sha256.

    Raises:
        CacheError: naming the directory, how many texts are missing or differ, and how to rebuild them.
    """
    directory = directory or cache_dir()
    found, missing, differ = check(rows, directory, ".log")
    if missing or differ:
        raise CacheError(incomplete(
            "pasted-log", directory, len(rows), missing, differ,
            "The texts are not committed (they are others' words): rebuild them by copying each thread's comment "
            "named in real_threads.jsonl into <id>.log, or point ALLGPU_DOCTOR_LOG_CACHE at a built cache."))
    return {key: path.read_text(encoding="utf-8") for key, path in found.items()}


def add(stage: Path, path: Path = REFERENCES, round_: int = 1) -> int:
    """Stage files -> cache texts + jsonl rows (rows already present keep their place). Returns rows added."""
    rows = references(path)
    known = {r["id"] for r in rows}
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    added = 0
    threads = {(r["repo"].lower(), int(r["issue"])): r["id"] for r in rows}
    by_id = {r["id"]: r for r in rows}
    for file in sorted(stage.glob("*.txt")):
        meta, text = parse_stage(file)
        case_id = file.stem
        if case_id in known:
            if sha256(text) != by_id[case_id]["sha256"]:
                raise CacheError(f"{file}: id {case_id!r} is already a row with another text; rename the stage file")
            (directory / f"{case_id}.log").write_text(text, encoding="utf-8")
            continue
        issue = int(meta["issue"])
        if (meta["repo"].lower(), issue) in threads:
            raise CacheError(f"{file}: {meta['repo']}#{issue} is already row {threads[(meta['repo'].lower(), issue)]!r}")
        (directory / f"{case_id}.log").write_text(text, encoding="utf-8")
        rows.append({"id": case_id, "repo": meta["repo"], "issue": issue,
                     "url": f"https://github.com/{meta['repo']}/issues/{issue}", "log_in": meta["log_in"],
                     "cause": meta["cause"], "settled_by": meta["settled_by"], "settled_ref": meta["settled_ref"],
                     "sha256": sha256(text), "round": round_,
                     "split": split_of(meta["repo"], issue) if round_ == 1 or round_ >= 4 else "held-out"})
        added += 1
    write_rows(path, rows)
    return added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("verify")
    a = sub.add_parser("add")
    a.add_argument("stage", type=Path)
    a.add_argument("--round", type=int, default=1)
    args = parser.parse_args()
    if args.cmd == "add":
        print(f"{add(args.stage, round_=args.round)} rows added")
        return 0
    try:
        texts = load(references())
    except CacheError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(texts)} pasted logs present, every sha256 matches ({cache_dir()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
