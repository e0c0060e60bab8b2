"""The migrated script's imports: Keras 3 on PyTorch before the first ``import keras``, ``allgpu`` and ``torch``
where they are now used, ``tensorflow`` dropped when nothing uses it any more."""

from __future__ import annotations

import re

import libcst as cst

from allgpu.migrate.cst import dotted, statement
from allgpu.migrate.notes import CHANGED, Note

BACKEND = 'os.environ["KERAS_BACKEND"] = "torch"  # before the first `import keras`: Keras 3 on PyTorch\n'
BACKEND_NOTE = ('os.environ["KERAS_BACKEND"] = "torch" added before the first keras import: without it Keras 3 '
                'runs on its TensorFlow backend, which allgpu does not distribute')
ADDED = ("keras", "torch", "allgpu")
_KERAS_IMPORT = re.compile(r"\s*(import\s+(tensorflow\.)?keras\b|from\s+(tensorflow\.)?keras\b"
                           r"|from\s+tensorflow\s+import\s+.*\bkeras\b)")


def keras_import_line(source: str) -> int:
    """The original line of the script's first keras import (1 when none is found by its text)."""
    return next((n for n, line in enumerate(source.splitlines(), 1) if _KERAS_IMPORT.match(line)), 1)


def _used_heads(module: cst.Module) -> set[str]:
    """Names used as values (not bound by an import): the heads of every chain."""
    heads: set[str] = set()

    class _Heads(cst.CSTVisitor):
        def visit_Import(self, node) -> bool:
            return False

        def visit_ImportFrom(self, node) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            heads.add(node.value)

    module.visit(_Heads())
    return heads


def _imports_keras(module: cst.Module) -> bool:
    """Whether ``module`` imports Keras anywhere (``import keras[.x] [as K]``, ``from keras[.x] import ...``)."""
    found = []

    class _Keras(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            found.extend(a for a in node.names if (dotted(a.name) or "").split(".")[0] == "keras")

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if not node.relative and (dotted(node.module) or "").split(".")[0] == "keras":
                found.append(node)

    module.visit(_Keras())
    return bool(found)


def _plain_import(stmt: cst.CSTNode) -> str | None:
    """``import X`` (one name, no alias) -> ``X``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Import):
        names = stmt.body[0].names
        if len(names) == 1 and names[0].asname is None:
            return dotted(names[0].name)
    return None


def _alias(stmt: cst.CSTNode) -> str | None:
    """``import X as Y`` (one name) -> ``Y``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Import):
        names = stmt.body[0].names
        if len(names) == 1 and names[0].asname is not None and isinstance(names[0].asname.name, cst.Name):
            return names[0].asname.name.value
    return None


def _without_tensorflow(stmt: cst.BaseStatement, aliases: dict[str, str]) -> cst.BaseStatement | None:
    """``stmt`` without its ``import tensorflow [as tf]`` names; None when nothing is left of it."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Import)):
        return stmt
    kept = [a for a in stmt.body[0].names
            if (a.asname.name.value if a.asname else (dotted(a.name) or "").split(".")[0]) not in aliases]
    if not kept:
        return None
    if len(kept) == len(stmt.body[0].names):
        return stmt
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return stmt.with_changes(body=[stmt.body[0].with_changes(names=kept)])


def _drop_keeping_comments(body: list, kept: list) -> list:
    """``kept`` without its Nones; a dropped statement's comment lines move onto the next statement kept."""
    out, carry = [], []
    for old, new in zip(body, kept):
        if new is None:
            carry += [line for line in old.leading_lines if line.comment is not None]
            continue
        if carry:
            new = new.with_changes(leading_lines=[*carry, *new.leading_lines])
            carry = []
        out.append(new)
    return out


def _insertion_point(body: list[cst.BaseStatement]) -> int:
    """After the module docstring and ``from __future__`` imports."""
    i = 0
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) \
            and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        i = 1
    while i < len(body) and isinstance(body[i], cst.SimpleStatementLine) and \
            isinstance(body[i].body[0], cst.ImportFrom) and dotted(body[i].body[0].module) == "__future__":
        i += 1
    return i


def finish(module: cst.Module, aliases: dict[str, str], tf_import_line: int | None,
           source: str) -> tuple[cst.Module, list[Note]]:
    """Add the imports the migrated names need and drop TensorFlow's when unused.

    Args:
        module: the migrated module; ``aliases``: TensorFlow's local names in it.
        tf_import_line: the original line of ``import tensorflow`` (for the note), None if absent.
        source: the original text (a script that already sets ``KERAS_BACKEND`` is left to do so).
    """
    notes: list[Note] = []
    heads = _used_heads(module)
    sets_backend = "KERAS_BACKEND" in source  # the script chose its backend itself: its own `import keras` stays
    imported = {_plain_import(s) for s in module.body} | {_alias(s) for s in module.body}
    needed = [name for name in ADDED
              if name in heads and name not in imported and not (name == "keras" and sets_backend)]
    body = list(module.body)
    if aliases and not heads & set(aliases):
        body = _drop_keeping_comments(body, [_without_tensorflow(s, aliases) for s in body])
        notes.append(Note(tf_import_line or 1, CHANGED, "import tensorflow removed: nothing left uses TensorFlow"))
    backend = not sets_backend and ("keras" in needed or _imports_keras(module))
    if not needed and not backend:
        return module.with_changes(body=body), notes
    header: list[cst.BaseStatement] = []
    if backend:
        if "keras" not in needed:  # the script's own (or rewritten) keras import: Keras alone would pick TensorFlow
            notes.append(Note(keras_import_line(source), CHANGED, BACKEND_NOTE))
        header += [statement("import os\n"), statement(BACKEND)]
    header += [statement(f"import {name}\n") for name in needed]
    added = {_plain_import(s) for s in header} - {None}
    at = _insertion_point(body)
    rest = [s for s in body[at:] if _plain_import(s) not in added]  # the script's own `import os` etc., now above
    if rest and at == 0 and any(line.comment for line in rest[0].leading_lines):  # a file's opening comments
        header[0] = header[0].with_changes(leading_lines=rest[0].leading_lines)
        rest[0] = rest[0].with_changes(leading_lines=(cst.EmptyLine(),))
    elif rest and not rest[0].leading_lines:
        rest[0] = rest[0].with_changes(leading_lines=(cst.EmptyLine(),))
    return module.with_changes(body=body[:at] + header + rest), notes
