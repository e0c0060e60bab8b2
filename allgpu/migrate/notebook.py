"""``allgpu migrate notebook.ipynb``: a Jupyter notebook's code cells through the same codemods as a script.

The code cells are migrated as one program (:mod:`allgpu.migrate.cells`): the strategy of cell 2 and the model of
cell 5 are one program's names, as the kernel runs them. Magics and shell lines stay as they were, outputs and
metadata are kept, markdown is untouched; a cell that does not parse on its own is reported and left as it is. A
``%%writefile NAME.py`` cell is a script of its own (Colab/Kaggle notebooks then run it with ``!python NAME.py``)
and is migrated as one. Notes give ``cell N`` and the line in it, as ``allgpu lint`` does for notebooks.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field

from allgpu.errors import MigrateInputError
from allgpu.migrate.api import migrate_source
from allgpu.lint.notebook_files import writefile_scripts
from allgpu.migrate.cells import join, split
from allgpu.migrate.notes import KINDS, LINT, NOT_CONVERTED, Migration, summary


@dataclass(frozen=True)
class CellNote:
    """A migrate note in a notebook: ``line`` of ``cell`` (1-based, markdown cells counted) in the original, and
    ``written``: the same place in the result."""

    cell: int
    line: int
    kind: str
    message: str
    written: tuple[int, int] = (0, 0)

    def at(self, result: bool = False) -> str:
        cell, line = self.written if result else (self.cell, self.line)
        return f"cell {cell}:{line}"


@dataclass(frozen=True)
class NotebookMigration:
    """The result of migrating one notebook: ``source`` and ``result`` are the ``.ipynb`` JSON texts; ``cells``
    holds ``(cell, old source, new source)`` of each code cell that changed."""

    path: str
    source: str
    result: str
    notes: tuple[CellNote, ...] = ()
    cells: tuple[tuple[int, str, str], ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return bool(self.cells)

    @property
    def complete(self) -> bool:
        """Everything had an equivalent, every code cell parsed and ``allgpu lint`` finds no error in the result."""
        return not any(n.kind == NOT_CONVERTED or (n.kind == LINT and n.message.startswith("error"))
                       for n in self.notes)

    def diff(self) -> str:
        """A unified diff per changed cell (``a/PATH (cell N)``), of the cell's source, not of the JSON."""
        out = []
        for number, old, new in self.cells:
            side = self.path if self.path.startswith("/") else f"a/{self.path}"
            out += difflib.unified_diff((old + "\n").splitlines(True), (new + "\n").splitlines(True),
                                        fromfile=f"{side} (cell {number})", tofile=f"{side} (cell {number}, migrated)")
        return "".join(out)

    def report(self, written: bool = False) -> str:
        """``PATH:cell N:LINE: kind: message`` a line (a message repeated is one line listing its places), then a
        summary; lint findings and, with ``written``, every note, at the result's cell and line."""
        grouped: dict[tuple[str, str], list[str]] = {}
        for n in sorted(self.notes, key=lambda n: (KINDS.index(n.kind), n.cell, n.line)):
            grouped.setdefault((n.kind, n.message), []).append(n.at(written or n.kind == LINT))
        migrated = self.path if written else f"{self.path} (migrated)"
        lines = [f"{migrated if kind == LINT else self.path}:{', '.join(dict.fromkeys(at))}: {kind}: {message}"
                 for (kind, message), at in grouped.items()]
        return "\n".join(lines + summary(self.path, self.changed, self.notes)) + "\n"


def _read(raw: str, path: str):
    """The notebook as nbformat 4; one that misses keys Jupyter's schema wants (a cell without ``metadata`` or
    ``outputs``, as generators write them) is read as it is, as ``allgpu lint`` reads it."""
    import warnings

    import nbformat
    from nbformat.warnings import MissingIDFieldWarning

    try:
        with warnings.catch_warnings():  # a 4.5 notebook without cell ids (older tools): nbformat adds them
            warnings.simplefilter("ignore", MissingIDFieldWarning)
            return nbformat.reads(raw, as_version=4)
    except Exception as exc:  # nbformat raises NotJSONError, ValidationError, KeyError... for what it cannot read
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("nbformat") == 4 and isinstance(data.get("cells"), list) \
                and all(isinstance(c, dict) for c in data["cells"]):
            nb = nbformat.from_dict(data)
            for cell in nb.cells:
                cell.setdefault("cell_type", "raw")
                cell.source = "".join(cell.get("source") or "") if isinstance(cell.get("source"), list) \
                    else str(cell.get("source") or "")
            return nb
        raise MigrateInputError(f"{path}: not a notebook nbformat can read ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}); nothing migrated") from None


def _write(nb) -> str:
    """Jupyter's layout (nbformat's writer; a notebook its schema refuses: the same layout, unvalidated)."""
    import nbformat

    try:
        return nbformat.writes(nb) + "\n"
    except Exception:  # jsonschema's ValidationError for the keys the schema wants and the notebook lacks
        return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _program_notes(migration: Migration, origin: list, result_origin: list) -> list[CellNote]:
    out = []
    for note in migration.notes:
        cell, line = origin[min(note.line, len(origin)) - 1]
        where = result_origin[min(migration.result_line(note.line), len(result_origin)) - 1]
        out.append(CellNote(cell, line, note.kind, note.message, where))
    return out


def _writefile_cell(number: str, name: str, body: str, path: str) -> tuple[str | None, list[CellNote]]:
    """A ``%%writefile NAME.py`` cell's script migrated alone: its new body (None: unchanged) and notes (line N of
    the script is line N + 1 of the cell)."""
    try:
        migration = migrate_source(body, f"{path} (cell {number}: {name})", lint=False)
    except MigrateInputError as exc:
        return None, [CellNote(number, 1, NOT_CONVERTED, f"{exc}; left as it is", (number, 1))]
    notes = [CellNote(number, n.line + 1, n.kind, f"{name}: {n.message}", (number, migration.result_line(n.line) + 1))
             for n in migration.notes]
    return (migration.result if migration.changed else None), notes


def migrate_notebook(raw: str, path: str = "notebook.ipynb", *, lint: bool = True) -> NotebookMigration:
    """Migrate the ``.ipynb`` JSON text ``raw``; nothing is written.

    Raises:
        MigrateInputError: ``raw`` is not notebook JSON (nbformat 4, a ``cells`` list). A notebook that misses keys
            Jupyter's schema wants is read as it is.
    """
    nb = _read(raw, path)
    scripts = {number: (name, body) for number, name, body in writefile_scripts(json.dumps(nb))}
    code = [(i, c.source) for i, c in enumerate(nb.cells, 1) if c.cell_type == "code" and i not in scripts]
    program = join(code)
    notes = [CellNote(cell, line, NOT_CONVERTED, f"this cell is not valid Python on its own ({message}): left as "
                      "it is, and its names are unknown to the other cells' migration", (cell, line))
             for cell, line, message in program.bad]
    new: dict[int, str] = {}
    if program.text:
        migration = migrate_source(program.text, path, lint=False)
        new, result_origin = split(program, migration.result, path)
        notes += _program_notes(migration, program.origin, result_origin)
        new = {n: text for n, text in new.items() if text != program.masked[n].rstrip("\n")}
    for number, (name, body) in scripts.items():
        body_new, script_notes = _writefile_cell(number, name, body, path)
        notes += script_notes
        if body_new is not None:
            new[number] = nb.cells[number - 1].source.partition("\n")[0] + "\n" + body_new.rstrip("\n")
    changed = tuple((n, nb.cells[n - 1].source, text) for n, text in sorted(new.items())
                    if text != nb.cells[n - 1].source)
    for number, _, text in changed:
        nb.cells[number - 1].source = text
    result = _write(nb) if changed else raw
    if lint and changed:
        from allgpu.lint import check_source

        notes += [CellNote(f.cell or 0, f.line, LINT, f"{f.severity} {f.id}: {f.message}", (f.cell or 0, f.line))
                  for f in check_source(result, path)]
    return NotebookMigration(path, raw, result, tuple(notes), changed)
