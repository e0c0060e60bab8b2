"""Score the checker on the labelled real-world corpus (``benchmarks/lint_corpus/corpus.tsv``).

Scoring is per (file, rule), the unit the corpus README defines: a finding *matches* a label when the rule ids
are equal and, where the label gives evidence lines, the finding lies within ``TOLERANCE`` lines of one of
them (same cell for a notebook). TP: an expected rule with a matching finding; FN: an expected rule without
one; FP: a rule reported in a file where none of its findings matches an expected label.
"""

from __future__ import annotations

import csv
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from allgpu.errors import LintUsageError
from allgpu.lint.checker import check_path
from allgpu.lint.evaluate import RuleScore, total_of

TOLERANCE = 3
Location = tuple  # (cell or None, line)


def parse_evidence(text: str) -> dict[str, list[Location]]:
    """``"TF001:12,30;TF008:cell 3:4"`` -> ``{"TF001": [(None, 12), (None, 30)], "TF008": [(3, 4)]}``.

    Raises:
        ValueError: a part is not ``RULE:loc,loc`` with integer lines.
    """
    out: dict[str, list[Location]] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        rule, _, locs = part.partition(":")
        if not locs:
            raise LintUsageError(f"evidence part {part!r} has no line numbers")
        for loc in filter(None, (x.strip() for x in locs.split(","))):
            if loc.startswith("cell "):
                cell, _, line = loc[5:].partition(":")
                out.setdefault(rule.strip(), []).append((int(cell), int(line)))
            else:
                out.setdefault(rule.strip(), []).append((None, int(loc)))
    return out


def read_rows(tsv: Path) -> list[dict[str, str]]:
    """The rows of a corpus TSV (header row; no quoting) as dicts."""
    with tsv.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [{k: (v or "").strip() for k, v in r.items() if k is not None} for r in reader if r.get("id")]


def matches(finding, evidence: list[Location]) -> bool:
    """Does ``finding`` lie within TOLERANCE lines of one evidence location (any place when there is none)?"""
    if not evidence:
        return True
    return any(cell == finding.cell and abs(line - finding.line) <= TOLERANCE for cell, line in evidence)


@dataclass
class CorpusScore:
    """Scores of one split: per rule, the files, crashes and the mistakes ``(id, rule, kind, detail)``."""

    rules: dict[str, RuleScore] = field(default_factory=dict)
    files: int = 0
    clean_files: int = 0
    crashes: list[str] = field(default_factory=list)
    mistakes: list[tuple[str, str, str, str]] = field(default_factory=list)

    @property
    def total(self) -> RuleScore:
        return total_of(self.rules.values())


def score_file(row: dict[str, str], findings, out: CorpusScore, scored: set[str] | None) -> None:
    """Add one file's (file, rule) outcomes to ``out``; ``scored`` limits the rules counted (None = all)."""
    expected = {r.strip() for r in row["expected"].split(",") if r.strip()}
    evidence = parse_evidence(row["evidence"])
    by_rule: dict[str, list] = {}
    for f in findings:
        by_rule.setdefault(f.rule_id, []).append(f)
    for rid in sorted(expected | set(by_rule)):
        if scored is not None and rid not in scored:
            continue
        s = out.rules.setdefault(rid, RuleScore())
        hits = [f for f in by_rule.get(rid, []) if matches(f, evidence.get(rid, []))] if rid in expected else []
        if rid in expected and hits:
            s.tp += 1
        elif rid in expected:
            s.fn += 1
            out.mistakes.append((row["id"], rid, "FN", _where(evidence.get(rid, []))))
        if rid in by_rule and not hits:
            s.fp += 1
            out.mistakes.append((row["id"], rid, "FP", _where([(f.cell, f.line) for f in by_rule[rid]])))


def _where(locs: list[Location]) -> str:
    return ",".join(f"cell {c}:{ln}" if c is not None else str(ln) for c, ln in locs[:6])


def score_corpus(rows: list[dict[str, str]], cache: Path, split: str | None = None,
                 scored: set[str] | None = None, select=None) -> tuple[CorpusScore, list[str]]:
    """Run the checker on every cached file of ``split`` (None = all) and score it.

    Returns:
        ``(score, missing)``: ``missing`` lists the ids whose file is not in ``cache`` (run fetch.py).
    """
    out, missing = CorpusScore(), []
    for row in rows:
        if split is not None and row["split"] != split:
            continue
        path = cache / row["id"] / Path(row["path"]).name
        if not path.is_file():
            missing.append(row["id"])
            continue
        try:
            findings = check_path(path, select=select)
        except Exception:  # a crash is a result to report, not a reason to stop scoring
            out.crashes.append(f"{row['id']}: {traceback.format_exc(limit=3)}")
            findings = []
        out.files += 1
        out.clean_files += not row["expected"].strip()
        score_file(row, findings, out, scored)
    return out, missing
