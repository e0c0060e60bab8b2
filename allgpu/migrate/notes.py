"""What a migration did, line by line: the notes ``allgpu migrate`` prints beside its diff."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

# The kinds of note, in the order the report lists them.
CHANGED = "changed"          # rewritten to its direct equivalent
FIXED = "fixed"              # a multi-device mistake the seeds show, corrected (the note says what and why)
KEPT = "kept"                # left as it is on purpose (tf.data: allgpu reads it)
NOT_CONVERTED = "not converted"  # left as it is: no direct equivalent; the note says why and what to do
LINT = "lint"                # a finding of `allgpu lint` on the result
KINDS = (CHANGED, FIXED, KEPT, NOT_CONVERTED, LINT)


@dataclass(frozen=True)
class Note:
    """One thing done or left alone.

    Attributes:
        line: 1-based line in the *original* script (for a lint finding: in the result;
            :meth:`Migration.result_line` maps the others there).
        kind: one of :data:`KINDS`.
        message: what and why, naming the TensorFlow spelling.
    """

    line: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.kind}: {self.message}"


@dataclass(frozen=True)
class Migration:
    """The result of migrating one script.

    Attributes:
        path: the script's name, for the diff header.
        source: the original text.
        result: the migrated text (equal to ``source`` when nothing had an equivalent).
        notes: every change, fix, kept name, unconverted name and lint finding, by line.
    """

    path: str
    source: str
    result: str
    notes: tuple[Note, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return self.result != self.source

    @property
    def complete(self) -> bool:
        """Everything had an equivalent and ``allgpu lint`` finds no error in the result."""
        return not any(n.kind == NOT_CONVERTED or (n.kind == LINT and n.message.startswith("error"))
                       for n in self.notes)

    def diff(self) -> str:
        """The unified diff from the original to the result (``--- a/PATH``, ``+++ b/PATH``); empty if unchanged."""
        return "".join(difflib.unified_diff(self.source.splitlines(keepends=True),
                                            self.result.splitlines(keepends=True),
                                            fromfile=self._side("a"), tofile=self._side("b")))

    def _side(self, side: str) -> str:
        return self.path if self.path.startswith("/") else f"{side}/{self.path}"

    def result_line(self, line: int) -> int:
        """Where original line ``line`` is in the result: the same text moved by the lines added or removed above
        it; a rewritten line, the most alike line of its rewrite; a removed line, the line now in its place."""
        old, new = self.source.splitlines(), self.result.splitlines()
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            if not i1 <= line - 1 < i2:
                continue
            if tag == "equal":
                return j1 + line - i1
            if tag == "delete" or j1 == j2:
                return min(j1 + 1, max(len(new), 1))
            return 1 + max(range(j1, j2), key=lambda j: (difflib.SequenceMatcher(None, old[line - 1], new[j]).ratio(),
                                                          -abs(j - j1 - (line - 1 - i1))))
        return line

    def report(self, written: bool = False) -> str:
        """The notes by kind, one ``PATH:LINES: kind: message`` a line (a message repeated on several lines is
        one line listing them), then a summary line.

        Migrate's own notes give the original script's lines and ``allgpu lint``'s findings the result's, shown as
        ``PATH (migrated):LINE``; with ``written`` (the result replaced the script) every line is the written
        file's, shown as ``PATH:LINE``."""
        grouped: dict[tuple[str, str], list[int]] = {}
        for n in sorted(self.notes, key=lambda n: (KINDS.index(n.kind), n.line)):
            line = self.result_line(n.line) if written and n.kind != LINT else n.line
            grouped.setdefault((n.kind, n.message), []).append(line)
        migrated = self.path if written else f"{self.path} (migrated)"
        lines = [f"{migrated if kind == LINT else self.path}:{','.join(map(str, sorted(set(at))))}: {kind}: {message}"
                 for (kind, message), at in grouped.items()]
        return "\n".join(lines + summary(self.path, self.changed, self.notes)) + "\n"


def summary(path: str, changed: bool, notes) -> list[str]:
    """A migration report's closing lines (a script's or a notebook's): what was left, and lint's errors."""
    left = sum(n.kind == NOT_CONVERTED for n in notes)
    errors = sum(n.kind == LINT and n.message.startswith("error") for n in notes)
    if not changed and not notes:
        lines = [f"{path}: nothing to migrate (no TensorFlow names)"]
    elif left:
        lines = [f"{path}: {left} thing(s) not converted: see the lines above; the rest is migrated"]
    else:
        lines = [f"{path}: migrated; everything had a direct equivalent"]
    if errors:
        lines.append(f"{path}: allgpu lint finds {errors} error(s) in the result (the `lint: error` lines; "
                     "`allgpu lint --explain ID` shows the fix)")
    return lines
