"""The tuning / held-out split of the author-labelled corpus: by repository, fixed once, never changed.

A repository's half is decided by a seeded hash of its name: ``sha256(f"{SEED}:{owner/name}")``, first byte even
-> ``tune``, odd -> ``heldout``. That is a fair coin per repository, the same on every machine and for every
later entry, so no repository is ever in both halves and adding entries never moves an old one. SEED was fixed
on 2026-11-24, before any rule was changed against this corpus. ``author_split.tsv`` lists every repository of
the corpus with its half (written by ``python benchmarks/lint_corpus/author_split.py``; checked by the tests).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

SEED = 20261124
HERE = Path(__file__).resolve().parent


def half(repo: str, seed: int = SEED) -> str:
    """``"tune"`` or ``"heldout"`` for the repository ``owner/name``."""
    return "tune" if hashlib.sha256(f"{seed}:{repo}".encode()).digest()[0] % 2 == 0 else "heldout"


def main() -> int:
    rows = [json.loads(x) for x in (HERE / "author_labels.jsonl").read_text().splitlines() if x.strip()]
    repos = sorted({r["repo"] for r in rows})
    lines = ["repo\thalf\tentries"] + [f"{r}\t{half(r)}\t{sum(e['repo'] == r for e in rows)}" for r in repos]
    (HERE / "author_split.tsv").write_text("\n".join(lines) + "\n")
    for h in ("tune", "heldout"):
        n = [r for r in repos if half(r) == h]
        print(f"{h}: {len(n)} repositories, {sum(e['repo'] in n for e in rows)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
