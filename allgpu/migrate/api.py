"""``migrate_source``: one script from ``tf.distribute`` + ``tf.keras`` to allgpu + Keras 3 on PyTorch."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper

from allgpu.errors import MigrateInputError
from allgpu.migrate import backend, header, names, reset_states
from allgpu.migrate.cst import tensorflow_aliases
from allgpu.migrate.notes import LINT, NOT_CONVERTED, Migration, Note
from allgpu.migrate.rename import Rename, script_facts
from allgpu.migrate.scope_fix import model_notes, strategies


def _names_used(module: cst.Module) -> set[str]:
    found: set[str] = set()

    class _All(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.add(node.value)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # `model.trainable_weights` uses `model`, not a name `trainable_weights`
            return False

    module.visit(_All())
    return found


def _tf_import_line(source: str) -> int | None:
    for n, line in enumerate(source.splitlines(), 1):
        if line.lstrip().startswith("import tensorflow"):
            return n
    return None


def _lint(result: str, path: str) -> list[Note]:
    from allgpu.lint import check_source

    return [Note(f.location.line if f.location else 1, LINT, f"{f.severity} {f.id}: {f.message}")
            for f in check_source(result, path)]


def migrate_source(source: str, path: str = "script.py", *, lint: bool = True) -> Migration:
    """Migrate one script's text; nothing is written.

    Args:
        source: the script's Python source.
        path: its name, for the diff, the notes and the linter.
        lint: run ``allgpu lint`` on the result and add its findings as ``lint`` notes.

    Returns:
        A :class:`~allgpu.migrate.notes.Migration`: the result, its diff and a note per change, fix, kept name
        and name left unconverted (with the reason), by line of the original script.

    Raises:
        MigrateInputError: ``source`` is not valid Python (the line and the parser's message).
    """
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise MigrateInputError(f"{path}:{exc.raw_line}: not valid Python, nothing migrated: {exc.message}") from None
    aliases = tensorflow_aliases(module)
    found = strategies(module, aliases)
    module, chosen = backend.to_torch(module) if found else (module, [])
    only = next(((name, lines[0]) for name, lines in found.items() if len(lines) == 1), None) \
        if len(found) == 1 else None
    rename = Rename(aliases, _names_used(module), only, distributed=bool(found))
    rename.input_functions, rename.tf_checkpoints = script_facts(module, aliases)
    rename.resets = reset_states.receivers(module, aliases)
    migrated = MetadataWrapper(module, unsafe_skip_copy=True).visit(rename)
    fixes = model_notes(rename.models, rename.fixed, only, bool(found), frozenset(rename.in_functions))
    migrated, imports = header.finish(migrated, aliases, _tf_import_line(source), source)
    left = [Note(line, NOT_CONVERTED, f"{_spelling(q, aliases)}: {names.why_not(q)}")
            for q, line in _first_per_line(rename.leftovers)]
    notes = sorted([*chosen, *rename.notes, *fixes, *imports, *left], key=lambda n: n.line)
    result = migrated.code
    if lint and result != source:
        notes += _lint(result, path)
    return Migration(path, source, result, tuple(notes))


def _first_per_line(leftovers: dict[tuple[int, int], tuple[str, int]]) -> list[tuple[str, int]]:
    """One note per name and line (``tf.random.normal`` twice on a line is one note)."""
    seen: dict[tuple[str, int], None] = {}
    for (_, _), (qualified, line) in sorted(leftovers.items()):
        seen.setdefault((qualified, line), None)
    return list(seen)


def _spelling(qualified: str, aliases: dict[str, str]) -> str:
    """``tensorflow.device`` written back with the script's alias (``tf.device``)."""
    for alias, module in aliases.items():
        if qualified == module or qualified.startswith(module + "."):
            return alias + qualified[len(module):]
    return qualified
