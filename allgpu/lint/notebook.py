"""Read a Jupyter notebook as Python: code cells joined, IPython magics and shell lines blanked, with a line map.

Each code cell is parsed on its own first, so one broken cell is reported (E999) and the others are still
checked. Locations map back to ``(cell, line)``; ``cell`` is the 1-based position of the cell in the notebook,
markdown cells counted, as the notebook interface shows it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field

from allgpu.errors import NotebookError  # re-exported: its home was here

# Cell magics whose body is Python; any other ``%%magic`` cell (bash, writefile, html...) is skipped whole.
_PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun", "%%debug")


# Line magics IPython runs without their ``%`` (automagic): ``pip install x``, ``cd data``, ``ls -l``.
_AUTOMAGIC = frozenset({"pip", "conda", "cd", "ls", "pwd", "mkdir", "rmdir", "cat", "cp", "mv", "rm", "env",
                        "load_ext", "matplotlib", "pylab", "mamba"})


@dataclass
class NotebookSource:
    """The Python text of a notebook and where each of its lines came from.

    Attributes:
        text: the code cells that parse, joined with newlines.
        origin: for line ``i`` of ``text`` (1-based), ``origin[i - 1] = (cell, line_in_cell)``.
        bad_cells: ``(cell, line_in_cell, message)`` for each code cell that does not parse.
    """

    text: str
    origin: list[tuple[int, int]] = field(default_factory=list)
    bad_cells: list[tuple[int, int, str]] = field(default_factory=list)


def _clean(line: str) -> str:
    """Blank an IPython-only line, keeping its indentation so the block stays valid."""
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    if stripped.startswith(("%", "!", "?")) or stripped.rstrip().endswith("?") and not stripped.startswith("#"):
        return f"{indent}pass"
    word, _, rest = stripped.partition(" ")
    if word in _AUTOMAGIC and rest and rest[0] not in "=([.,:+-*/%<>!":  # ``pip install x``, ``cd data``
        return f"{indent}pass"
    if "= !" in stripped or "= %" in stripped:  # ``files = !ls``, ``t = %timeit -o f()``
        return f"{indent}pass"
    return line


def _depth_after(line: str, depth: int) -> int:
    """Bracket depth after ``line`` (strings and comments skipped roughly): > 0 means the statement goes on."""
    quote = None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
    return depth


def cell_lines(source) -> list[str]:
    text = "".join(source) if isinstance(source, list) else str(source or "")
    lines = _leading_indent_removed(text.splitlines())
    if lines and lines[0].lstrip().startswith("%%"):
        if not lines[0].lstrip().startswith(_PYTHON_CELL_MAGICS):
            return []
        lines = [""] + lines[1:]
    out, depth, continued, shell = [], 0, False, False
    for ln in lines:
        if continued and shell:  # ``!pip install a \`` goes on: the shell command's next line
            out.append("")
        else:
            # inside an open bracket or after a backslash, ``%(a, b)`` is string formatting, not a magic
            out.append(ln if depth or continued else _clean(ln))
            shell = out[-1] != ln
            depth = _depth_after(ln, depth) if not shell else 0
        continued = ln.rstrip().endswith("\\")
    return out


def _leading_indent_removed(lines: list[str]) -> list[str]:
    """IPython's ``leading_indent``: a cell whose first line is indented runs with that indentation removed."""
    first = next((ln for ln in lines if ln.strip()), "")
    prefix = first[: len(first) - len(first.lstrip())]
    if not prefix:
        return lines
    return [ln[len(prefix):] if ln.startswith(prefix) else ln for ln in lines]


def source_lines_in_file(raw: str) -> dict[int, int]:
    """Cell number -> the line of the ``.ipynb`` file that holds the cell's first source line.

    Relies on the layout Jupyter writes (``json.dump(indent=1, sort_keys=True)``): one ``"cell_type"`` key
    per cell, ``"source"`` last, one list element per line. Cells not found this way are left out (SARIF then
    falls back to the line inside the cell).
    """
    out: dict[int, int] = {}
    cell = 0
    waiting = False
    for number, line in enumerate(raw.splitlines(), start=1):
        stripped = line.lstrip()
        if stripped.startswith('"cell_type":'):
            cell += 1
            waiting = True
        elif waiting and stripped.startswith('"source":'):
            out[cell] = number + 1 if stripped.rstrip().endswith("[") else number
            waiting = False
    return out


def read_notebook(raw: str) -> NotebookSource:
    """Turn the JSON text of an ``.ipynb`` into a :class:`NotebookSource`.

    Raises:
        NotebookError: ``raw`` is not JSON or has no ``cells`` list (nbformat 4 layout expected).
    """
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not valid notebook JSON: {exc.msg} at line {exc.lineno}") from exc
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("no 'cells' list: expected an nbformat 4 notebook")
    out = NotebookSource(text="")
    chunks: list[str] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        lines = cell_lines(cell.get("source", ""))
        if not lines:
            continue
        code = "\n".join(lines)
        try:
            ast.parse(code)
        except SyntaxError as exc:
            out.bad_cells.append((number, exc.lineno or 1, exc.msg or "invalid syntax"))
            continue
        chunks.append(code)
        out.origin.extend((number, i) for i in range(1, len(lines) + 1))
    out.text = "\n".join(chunks) + ("\n" if chunks else "")
    return out
