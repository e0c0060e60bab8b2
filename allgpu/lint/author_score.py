"""Score the checker on the author-labelled corpus: files before and after their authors' own fix commits.

An entry (``benchmarks/lint_corpus/author_labels.jsonl``) names a file at the parent of a fixing commit
(``before``: a positive for each of the entry's labels) and at the fixing commit (``after``: a negative for
them, when ``after_negative``). Scoring is per (file version, label), at file level, the unit the authors'
commit settles: before + reported = TP, before + not reported = FN, after + reported = FP, after + not
reported = TN. Rules the authors did not touch are not scored in these files (nobody said whether they are
right there). Counts come per label and per framework (``tf`` / ``pt``), each with a Wilson 95% interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` for ``k`` successes in ``n`` trials (``(0, 1)`` when n = 0):
    SciPy's ``binomtest(k, n).proportion_ci(method="wilson")``."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest

    interval = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


@dataclass
class Tally:
    """Outcomes of one label (or one framework, or all): true/false positives, false/true negatives."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def precision_ci(self) -> tuple[float, float]:
        return wilson(self.tp, self.tp + self.fp)

    @property
    def recall_ci(self) -> tuple[float, float]:
        return wilson(self.tp, self.tp + self.fn)

    def add(self, other: Tally) -> None:
        self.tp, self.fp, self.fn, self.tn = (self.tp + other.tp, self.fp + other.fp, self.fn + other.fn,
                                              self.tn + other.tn)


@dataclass
class AuthorScore:
    """Tallies per label and per framework; ``mistakes``: ``(entry id, version, label, "FP"|"FN", where)``."""

    labels: dict[str, Tally] = field(default_factory=dict)
    frameworks: dict[str, Tally] = field(default_factory=dict)
    entries: int = 0
    crashes: list[str] = field(default_factory=list)
    mistakes: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    @property
    def total(self) -> Tally:
        t = Tally()
        for s in self.labels.values():
            t.add(s)
        return t


def family(entry: dict) -> str:
    """``"tf"`` for TensorFlow/Keras entries (label or file), ``"pt"`` for the rest."""
    labels = entry.get("labels", [])
    if entry.get("framework") == "tf" or (labels and all(x.startswith("TF") for x in labels)):
        return "tf"
    return "pt"


def _where(entry: dict, version: str, findings) -> str:
    if findings:
        return ",".join(f"cell {f.cell}:{f.line}" if f.cell is not None else str(f.line) for f in findings[:6])
    lines = entry.get(f"lines_{version}") or []
    return ",".join(str(x) for x in lines[:6]) or "?"


def score_entry(entry: dict, version: str, findings, out: AuthorScore) -> None:
    """Add the outcomes of one file version (``"before"`` or ``"after"``) of ``entry`` to ``out``."""
    if version == "after" and not entry.get("after_negative", True):
        return
    for label in entry["labels"]:
        hits = [f for f in findings if f.rule_id == label]
        t = Tally()
        if version == "before":
            t.tp, t.fn = int(bool(hits)), int(not hits)
        else:
            t.fp, t.tn = int(bool(hits)), int(not hits)
        out.labels.setdefault(label, Tally()).add(t)
        out.frameworks.setdefault(family(entry), Tally()).add(t)
        if t.fn or t.fp:
            kind = "FN" if t.fn else "FP"
            out.mistakes.append((entry["id"], version, label, kind, _where(entry, version, hits)))


def fmt_rate(value: float | None, ci: tuple[float, float]) -> str:
    """``0.83 [0.61-0.94]``, or ``   -`` when nothing was counted."""
    return "   -            " if value is None else f"{value:.2f} [{ci[0]:.2f}-{ci[1]:.2f}]"
