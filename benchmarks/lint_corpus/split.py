"""Assign the tune / held-out split of corpus.tsv, once, by a seeded shuffle within each framework family.

Run: python benchmarks/lint_corpus/split.py [--tsv FILE]

Family: rows whose id starts with ``pt`` are the PyTorch family, every other row the TensorFlow/Keras family.
Only rows whose ``split`` is empty are assigned: they are sorted by id, shuffled with
``random.Random(f"{SEED}:{family}")`` and the first ceil(n/2) become ``tune``, the rest ``heldout``.
A row that already has a split keeps it forever (so re-running changes nothing).
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261123
COLUMNS = ["id", "repo", "path", "commit", "framework", "source_kind", "split", "expected", "evidence",
           "lookalikes", "notes"]


def family(row: dict[str, str]) -> str:
    return "pt" if row["id"].startswith("pt") else "tf"


def assign(rows: list[dict[str, str]], seed: int = SEED) -> dict[str, int]:
    """Fill the empty ``split`` fields in place; returns how many rows each family got assigned."""
    counts: dict[str, int] = {}
    for fam in sorted({family(r) for r in rows}):
        todo = sorted((r for r in rows if family(r) == fam and not r["split"]), key=lambda r: r["id"])
        random.Random(f"{seed}:{fam}").shuffle(todo)
        half = (len(todo) + 1) // 2
        for i, r in enumerate(todo):
            r["split"] = "tune" if i < half else "heldout"
        counts[fam] = len(todo)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tsv", type=Path, default=HERE / "corpus.tsv")
    args = ap.parse_args()
    with args.tsv.open(newline="", encoding="utf-8") as fh:
        rows = [{k: (v or "") for k, v in r.items() if k is not None}
                for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)]
    counts = assign(rows)
    with args.tsv.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, COLUMNS, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n",
                           escapechar=None)
        w.writeheader()
        w.writerows(rows)
    for fam, n in counts.items():
        tune = sum(1 for r in rows if family(r) == fam and r["split"] == "tune")
        print(f"{fam}: {n} newly assigned; family now {tune} tune / "
              f"{sum(1 for r in rows if family(r) == fam) - tune} heldout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
