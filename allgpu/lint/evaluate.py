"""Score the checker on a labelled set of scripts, and time it on a large generated file.

A labelled set is a folder with ``manifest.json``: ``{"file.py": ["TF001", ...], ...}`` (``[]`` = clean;
keys starting with ``_`` are comments). Scoring is per (file, rule): a rule reported anywhere in a file
that lists it is a true positive, in a file that does not list it a false positive.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from allgpu.errors import LintUsageError
from allgpu.lint.catalog import RULES
from allgpu.lint.checker import check_path, check_source


@dataclass
class RuleScore:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


@dataclass
class Evaluation:
    """Per-rule and overall scores; ``mistakes`` lists ``(file, rule, "FP"|"FN")``."""

    rules: dict[str, RuleScore] = field(default_factory=dict)
    files: int = 0
    clean_files: int = 0
    mistakes: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def total(self) -> RuleScore:
        return total_of(self.rules.values())


def total_of(scores) -> RuleScore:
    """The sum of per-rule scores."""
    t = RuleScore()
    for s in scores:
        t.tp, t.fp, t.fn = t.tp + s.tp, t.fp + s.fp, t.fn + s.fn
    return t


def load_manifest(folder: Path) -> dict[str, list[str]]:
    """Read ``folder/manifest.json``.

    Raises:
        FileNotFoundError: no manifest in ``folder``.
        LintUsageError: (a ``ValueError``) the manifest names a file that is not in ``folder``.
    """
    data = json.loads((folder / "manifest.json").read_text())
    cases = {k: v for k, v in data.items() if not k.startswith("_")}
    missing = [k for k in cases if not (folder / k).is_file()]
    if missing:
        raise LintUsageError(f"manifest.json in {folder} names missing files: {missing}. Fix: add the files or "
                             "remove their entries.")
    return cases


def evaluate(folder: Path) -> Evaluation:
    """Run the checker on every labelled file in ``folder`` and score it per rule."""
    ev = Evaluation()
    for name, expected in sorted(load_manifest(folder).items()):
        found = {f.id for f in check_path(folder / name, select=list(RULES))}  # every rule, off ones too
        want = set(expected)
        ev.files += 1
        ev.clean_files += not want
        for rid in found | want:
            s = ev.rules.setdefault(rid, RuleScore())
            if rid in found and rid in want:
                s.tp += 1
            elif rid in found:
                s.fp += 1
                ev.mistakes.append((name, rid, "FP"))
            else:
                s.fn += 1
                ev.mistakes.append((name, rid, "FN"))
    return ev


def generate_source(folder: Path, min_lines: int) -> str:
    """A large file: the labelled ``.py`` scripts that parse, concatenated until ``min_lines`` lines.

    Every copy renames its top-level functions and classes (suffix ``_N``) so the file stays a plausible
    module; the repeated module-level names (``model``, ``strategy``) are kept, the worst case for resolution.
    """
    chunks = []
    for p in sorted(folder.glob("*.py")):
        text = p.read_text()
        try:
            compile(text, str(p), "exec", dont_inherit=True, flags=0x400)  # ast only
        except SyntaxError:
            continue
        chunks.append(text)
    out, n, copy = [], 0, 0
    while n < min_lines:
        for text in chunks:
            out.append(text.replace("def main(", f"def main_{copy}(").replace("main()", f"main_{copy}()"))
            n += text.count("\n")
        copy += 1
    return "\n".join(out)


def measure_speed(source: str, repeat: int = 3) -> tuple[int, float, float]:
    """``(lines, best wall seconds, best CPU seconds)`` for ``check_source`` on ``source`` over ``repeat`` runs.

    CPU time (``time.process_time``) is reported too because on a shared machine other processes inflate
    the wall time; on an idle machine the two agree.
    """
    lines = source.count("\n") + 1
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        check_source(source, "generated.py")
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return lines, wall, cpu
