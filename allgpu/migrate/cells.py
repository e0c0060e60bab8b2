"""A notebook's code cells as one Python program and back: the text ``allgpu migrate`` rewrites for a notebook.

The cells run in one kernel, one after the other, so they are one program: a strategy made in cell 2 and a model
built in cell 5 are the same names. Each code cell is written after a marker comment (``# allgpu-migrate-cell
N``); IPython-only lines (``%magic``, ``!shell``, ``pip install x``, a ``%%time`` first line) become placeholders
(``pass  # allgpu-migrate-ipython K``, or that comment alone for a shell line's continuation) that the codemods
leave alone and :func:`split` puts back as they were. A cell that does not parse on its own is left out (and
reported); a cell magic that is not Python (``%%bash``, ``%%writefile``) is not code to migrate.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from allgpu.errors import MigrateInputError
from allgpu.lint.notebook import cell_lines

MARK = "# allgpu-migrate-cell "
_IPYTHON = "allgpu-migrate-ipython "
_PLACEHOLDER = re.compile(r"^\s*(?:pass  )?# allgpu-migrate-ipython (\d+)\s*$")
_MARK_LINE = re.compile(r"^# allgpu-migrate-cell (\d+)\s*$")


@dataclass
class Program:
    """The joined program and how to read it back.

    Attributes:
        text: every code cell that parses, each after its marker line.
        origin: ``origin[i]`` is ``(cell, line_in_cell)`` for line ``i + 1`` of ``text`` (a marker line: the
            cell's line 1).
        cells: the cells in ``text``, in order (1-based among all cells, markdown counted, as lint numbers them).
        masked: each cell's text as written in ``text`` (without its marker), to tell a changed cell.
        ipython: the original of each placeholder, by its number.
        bad: ``(cell, line_in_cell, message)`` of each code cell that does not parse.
    """

    text: str = ""
    origin: list[tuple[int, int]] = field(default_factory=list)
    cells: list[int] = field(default_factory=list)
    masked: dict[int, str] = field(default_factory=dict)
    ipython: dict[int, str] = field(default_factory=dict)
    bad: list[tuple[int, int, str]] = field(default_factory=list)


def _masked(source: str, ipython: dict[int, str]) -> list[str] | None:
    """The cell's lines with IPython-only lines replaced by placeholders; None: a cell magic that is not Python."""
    original = source.splitlines()
    cleaned = cell_lines(source)
    if original and not cleaned and original[0].lstrip().startswith("%%"):
        return None
    out = []
    for old, new in zip(original, cleaned):
        if old.strip() not in ("", new.strip()) and new.strip() in ("pass", ""):
            number = len(ipython)
            ipython[number] = old
            indent = new[: len(new) - len(new.lstrip())]
            out.append(f"{indent}pass  # {_IPYTHON}{number}" if new.strip() else f"# {_IPYTHON}{number}")
        else:
            out.append(new)
    return out


def join(sources: list[tuple[int, str]]) -> Program:
    """``sources``: ``(cell number, source)`` of each code cell, in order. Returns the :class:`Program`."""
    program = Program()
    lines: list[str] = []
    for number, source in sources:
        masked = _masked(source, program.ipython)
        if masked is None:
            continue
        code = "\n".join(masked) + "\n"
        try:
            ast.parse(code)
        except SyntaxError as exc:
            program.bad.append((number, exc.lineno or 1, exc.msg or "invalid syntax"))
            continue
        program.cells.append(number)
        program.masked[number] = "\n".join(masked)
        lines.append(f"{MARK}{number}")
        program.origin.append((number, 1))
        lines += masked
        program.origin += [(number, i) for i in range(1, len(masked) + 1)]
    program.text = "\n".join(lines) + ("\n" if lines else "")
    return program


def split(program: Program, result: str, path: str = "notebook.ipynb") -> tuple[dict[int, str], list[tuple[int, int]]]:
    """The migrated ``result`` of ``program.text`` back into cells.

    Returns:
        ``{cell: new source}`` for every cell of the program (IPython lines restored, trailing blank lines
        dropped), and the ``(cell, line_in_cell)`` of each line of ``result`` (what a codemod put before the first
        marker, the new imports, opens the first cell).

    Raises:
        MigrateInputError: a marker was lost or moved out of order (a codemod dropped a cell's first comment).
    """
    cells: dict[int, list[str]] = {}
    order: list[int] = []
    origin: list[tuple[int, int]] = []
    head: list[str] = []
    for line in result.splitlines():
        mark = _MARK_LINE.match(line)
        if mark:
            order.append(int(mark.group(1)))
            cells[order[-1]] = []
            origin.append((order[-1], 1))
            continue
        target = cells[order[-1]] if order else head
        placeholder = _PLACEHOLDER.match(line)
        target.append(program.ipython[int(placeholder.group(1))] if placeholder else line)
        origin.append((order[-1], len(target)) if order else (program.cells[0] if program.cells else 1, len(head)))
    if order != program.cells:
        raise MigrateInputError(f"{path}: the migrated cells {program.cells} came back as {order}: they cannot be put "
                                "back; nothing migrated. Please report it with the notebook")
    if head and order:
        cells[order[0]] = head + cells[order[0]]
        shift = len(head)
        origin = [(c, n + shift) if c == order[0] and i >= len(head) else (c, n) for i, (c, n) in enumerate(origin)]
    return {number: "\n".join(lines).rstrip("\n") for number, lines in cells.items()}, origin
