"""Precision and recall of ``allgpu doctor --log`` cause ids on the public bug-report collection.

The collection (``benchmarks/doctor_logs/cases.tsv``) holds references to public bug reports of TensorFlow, Keras,
JAX and PyTorch users whose thread settles why a GPU sat idle, our cause label(s) for each, and a log we wrote from
the message formats each report shows (``logs/<id>.log``). It was split once at random (seed in the file) into a
tuning half, on which the message patterns were tuned, and a held-out half, scored only.

Scoring: for each log, the set of cause ids the verdict names is compared with the labelled set ('-' = none).
Micro-averaged precision = correct ids named / ids named; recall = correct ids named / ids labelled.

    python benchmarks/doctor_log_eval.py               # both halves; misses listed for the tuning half
    python benchmarks/doctor_log_eval.py --misses all  # also list held-out misses
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

HERE = Path(__file__).resolve().parent / "doctor_logs"


def load_cases(path: Path = HERE / "cases.tsv") -> list[dict[str, str]]:
    """The rows of cases.tsv (comment lines skipped)."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def predict(case_id: str) -> set[str]:
    """Cause ids the verdict names for one log."""
    text = (HERE / "logs" / f"{case_id}.log").read_text()
    return set(verdict_from_log(read_log(text)).cause_ids)


def score(cases: list[dict[str, str]]) -> dict[str, float | int | list]:
    named = correct = labelled = 0
    misses = []
    for case in cases:
        truth = set() if case["labels"] == "-" else set(case["labels"].split(","))
        got = predict(case["id"])
        named += len(got)
        labelled += len(truth)
        correct += len(got & truth)
        if got != truth:
            misses.append({"id": case["id"], "labels": sorted(truth), "named": sorted(got)})
    return {"cases": len(cases), "named": named, "labelled": labelled, "correct": correct,
            "precision": correct / named if named else 1.0, "recall": correct / labelled if labelled else 1.0,
            "misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", choices=("tuning", "all", "none"), default="tuning")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = load_cases()
    results = {half: score([c for c in cases if c["split"] == half]) for half in ("tuning", "held-out")}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'half':10} {'cases':>5} {'named':>5} {'labelled':>8} {'correct':>7} {'precision':>9} {'recall':>6}")
    for half, r in results.items():
        print(f"{half:10} {r['cases']:5d} {r['named']:5d} {r['labelled']:8d} {r['correct']:7d} "
              f"{r['precision']:9.3f} {r['recall']:6.3f}")
    for half, r in results.items():
        if args.misses == "none" or (args.misses == "tuning" and half != "tuning"):
            continue
        for m in r["misses"]:
            print(f"  miss [{half}] {m['id']}: labelled {m['labels'] or '-'}, named {m['named'] or '-'}")


if __name__ == "__main__":
    main()
