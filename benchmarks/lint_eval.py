"""Precision/recall of `allgpu lint`: on the hand-written cases (tests/lint_cases) or on the real-world corpus.

Run:
    python benchmarks/lint_eval.py [--lines 100000]          # hand-written cases + speed (issue 3)
    python benchmarks/lint_corpus/fetch.py                   # once: the corpus files into the cache
    python benchmarks/lint_eval.py --corpus [--split tune|heldout|both] [--mistakes] [--all-rules]

Corpus mode scores per (file, rule), a finding counting when it lies within 3 lines of a labelled evidence
line (benchmarks/lint_corpus/README.md); rules off by default are left out unless --all-rules.
Targets (issue 11, held-out half): precision >= 0.95 and recall >= 0.85 overall, no default rule below
precision 0.9, no crash.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from allgpu.lint.catalog import DEFAULT_OFF, RULES
from allgpu.lint.corpus_score import CorpusScore, read_rows, score_corpus
from allgpu.lint.evaluate import evaluate, generate_source, measure_speed

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "lint_cases"
CORPUS = ROOT / "benchmarks" / "lint_corpus" / "corpus.tsv"
CACHE = Path.home() / ".cache" / "allgpu-lint-corpus"


def print_table(title: str, rules: dict, total) -> None:
    print(title)
    print(f"  {'rule':<6} {'TP':>3} {'FP':>3} {'FN':>3} {'precision':>9} {'recall':>6}")
    for rid, s in sorted(rules.items()):
        print(f"  {rid:<6} {s.tp:>3} {s.fp:>3} {s.fn:>3} {s.precision:>9.2f} {s.recall:>6.2f}")
    print(f"  {'all':<6} {total.tp:>3} {total.fp:>3} {total.fn:>3} {total.precision:>9.2f} {total.recall:>6.2f}")


def run_cases(args) -> int:
    ev = evaluate(args.cases)
    print_table(f"labelled set: {ev.files} files ({ev.clean_files} clean) in {args.cases}", ev.rules, ev.total)
    for name, rid, kind in ev.mistakes:
        print(f"  {kind}: {rid} in {name}")
    min_prec = min((s.precision for s in ev.rules.values()), default=1.0)
    lines, wall, cpu = measure_speed(generate_source(args.cases, args.lines))
    print(f"speed: {lines} lines in {wall:.2f} s wall = {lines / wall:,.0f} lines/s "
          f"({cpu:.2f} s CPU = {lines / cpu:,.0f} lines/s; best of 3)")
    # CPU time decides: on a shared machine other processes inflate the wall time.
    ok = min_prec >= 0.95 and ev.total.recall >= 0.9 and cpu * 100_000 / lines < 5.0
    print(f"targets (precision >= 0.95 every rule, recall >= 0.9, 100k lines < 5 s): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def report_split(name: str, sc: CorpusScore, show_mistakes: bool) -> bool:
    t = sc.total
    print_table(f"{name}: {sc.files} files ({sc.clean_files} clean), {len(sc.crashes)} crash(es)", sc.rules, t)
    for c in sc.crashes:
        print(f"  CRASH {c}")
    if show_mistakes:
        for fid, rid, kind, where in sorted(sc.mistakes):
            print(f"  {kind}: {rid} in {fid} at {where}")
    low = [rid for rid, s in sc.rules.items() if s.tp + s.fp and s.precision < 0.9]
    ok = t.precision >= 0.95 and t.recall >= 0.85 and not low and not sc.crashes
    print(f"  targets (precision >= 0.95, recall >= 0.85, every rule >= 0.90, no crash): "
          f"{'met' if ok else 'NOT met'}{'; below 0.90: ' + ', '.join(sorted(low)) if low else ''}")
    return ok


def run_corpus(args) -> int:
    rows = read_rows(args.tsv)
    select = ",".join(RULES) if args.all_rules else None
    scored = None if args.all_rules else {r for r in RULES if r not in DEFAULT_OFF}
    splits = ["tune", "heldout"] if args.split == "both" else [args.split]
    print(f"corpus: {len(rows)} files in {args.tsv} (cache {args.cache})")
    ok = True
    for split in splits:
        sc, missing = score_corpus(rows, args.cache, split, scored, select=select)
        if missing:
            print(f"  {len(missing)} file(s) of {split} missing from the cache (run fetch.py): {', '.join(missing)}")
        ok = report_split(split, sc, args.mistakes) and ok
        if scored is not None:  # the pitfalls of rules that are off by default are still pitfalls: count them
            off = sum(1 for r in rows if r["split"] == split and r["id"] not in missing
                      for rid in {x for x in r["expected"].split(",") if x} if rid not in scored)
            t = sc.total
            print(f"  against every labelled pitfall ({off} of them belong to rules off by default): "
                  f"recall {t.tp / max(t.tp + t.fn + off, 1):.2f}")
    if not args.all_rules and DEFAULT_OFF:
        print(f"off by default (not scored): {', '.join(sorted(DEFAULT_OFF))}")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES)
    ap.add_argument("--lines", type=int, default=100_000, help="size of the generated file for the speed test")
    ap.add_argument("--corpus", action="store_true", help="score the real-world corpus instead")
    ap.add_argument("--tsv", type=Path, default=CORPUS)
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--split", choices=["tune", "heldout", "both"], default="both")
    ap.add_argument("--mistakes", action="store_true", help="list every FP and FN")
    ap.add_argument("--all-rules", action="store_true", help="also run and score the rules off by default")
    args = ap.parse_args()
    return run_corpus(args) if args.corpus else run_cases(args)


if __name__ == "__main__":
    sys.exit(main())
