"""What can still be checked in a file Python refuses: the code before a syntax error.

A file that does not parse (Python 2 code, a stray paste, a half-edited line) is still mostly code: the
statements before the first error are checked as if the file ended there, and the E999 finding says which lines
were not checked. A file that parses but does not compile (``return`` outside a function) is checked whole.
"""

from __future__ import annotations

import ast

_MAX_TRIES = 64


def parseable_prefix(text: str, error_line: int) -> tuple[ast.Module, str, int] | None:
    """``(tree, prefix text, lines kept)`` for the longest prefix ending before ``error_line`` that parses, cut
    at a top-level statement boundary; None when nothing before the error parses (or nothing is there)."""
    lines = text.splitlines(keepends=True)
    cut = min(max(error_line - 1, 0), len(lines))
    for _ in range(_MAX_TRIES):
        while cut > 0 and not _top_level_start(lines[cut - 1]) and cut < len(lines) and not _top_level_start(lines[cut]):
            cut -= 1
        if cut <= 0:
            return None
        prefix = "".join(lines[:cut])
        if prefix.strip():
            try:
                return ast.parse(prefix), prefix, cut
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
        cut -= 1
    return None


def _top_level_start(line: str) -> bool:
    """A line that begins a top-level statement: code at column 0 (not a comment, not a closing bracket)."""
    return bool(line) and not line[0].isspace() and not line.startswith(("#", ")", "]", "}"))


def unchecked_note(error_line: int, kept: int | None, total: int) -> str:
    """What the E999 finding adds about coverage."""
    if not kept:
        return "; nothing in the file was checked"
    return f"; lines {kept + 1}-{max(total, error_line)} were not checked (lines 1-{kept} were)"
