"""The seeds' most common mistake, fixed: a Keras model built outside ``strategy.scope()``.

TensorFlow then trains it on one device without a word; allgpu stops at its first step with ``NotMirroredError``.
Where the script has exactly one strategy and it is assigned in the same block as the model (at module level,
outside any function), migrate adds ``model = strategy.mirror(model)`` after both exist: allgpu's documented
fix, the same as building the model in the scope. Otherwise it reports the line and the fix.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from allgpu.migrate import names
from allgpu.migrate.cst import assigned_name, dotted, qualify, statement
from allgpu.migrate.notes import FIXED, NOT_CONVERTED, Note


def keras_model_call(value: cst.BaseExpression) -> bool:
    """``keras.Sequential(...)``, ``keras.Model(...)``, ``keras.applications.X(...)`` (after renaming)."""
    name = dotted(value.func) if isinstance(value, cst.Call) else None
    return bool(name) and (name in names.KERAS_MODEL_CALLS or name.startswith(names.KERAS_MODEL_PREFIXES))


def strategies(module: cst.Module, aliases: dict[str, str]) -> dict[str, list[int]]:
    """``NAME = tf.distribute.<X>Strategy(...)`` in the original script: ``{NAME: [line, ...]}``."""
    found: dict[str, list[int]] = {}

    class _Find(cst.CSTVisitor):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            pair = assigned_name(node)
            if pair and isinstance(pair[1], cst.Call) and \
                    names.RENAMES.get(qualify(dotted(pair[1].func), aliases) or "") in names.STRATEGY_ARGS:
                found.setdefault(pair[0], []).append(self.get_metadata(PositionProvider, node).start.line)

    MetadataWrapper(module, unsafe_skip_copy=True).visit(_Find())
    return found


def insert_mirrors(stmts: list, lines: list[int], models: dict[int, str], strategy: tuple[str, int] | None,
                   fixed: set[int]) -> tuple[list, list[int]]:
    """In one block, add ``model = strategy.mirror(model)`` after each model built outside a scope (``models``:
    original line -> name) once the strategy (``(name, line)``, the script's only one) is assigned in this block.
    The lines fixed are added to ``fixed``."""
    if strategy is None or strategy[1] not in lines:
        return stmts, lines
    at_strategy = lines.index(strategy[1])
    for i in sorted((i for i, line in enumerate(lines) if line in models), reverse=True):
        name = models[lines[i]]
        at = max(i, at_strategy) + 1
        stmts = [*stmts[:at], statement(f"{name} = {strategy[0]}.mirror({name})  # allgpu migrate: built outside "
                                        "strategy.scope()\n"), *stmts[at:]]
        lines = [*lines[:at], lines[i], *lines[at:]]
        fixed.add(lines[i])
    return stmts, lines


def model_notes(models: dict[int, str], fixed: set[int], strategy: tuple[str, int] | None,
                has_strategy: bool, in_functions: frozenset[int] = frozenset()) -> list[Note]:
    """A ``fixed`` note per model mirrored, a ``not converted`` one per model left outside the scope (one built in
    a function without the strategy beside it may be called inside a scope: nothing is said of it)."""
    if not has_strategy:
        return []  # no strategy at all: a one-device script, nothing to mirror
    notes = []
    for line, model in sorted(models.items()):
        if line in in_functions and line not in fixed:
            continue
        if line in fixed:
            notes.append(Note(line, FIXED, f"`{model}` was built outside strategy.scope() (TensorFlow would train "
                                           f"it on one device): added `{model} = {strategy[0]}.mirror({model})`, "
                                           "which mirrors it as if built in the scope"))
        else:
            notes.append(Note(line, NOT_CONVERTED, f"`{model}` is built outside strategy.scope(): allgpu stops at "
                                                   "its first training step with NotMirroredError; build it inside "
                                                   f"`with strategy.scope():` or add `{model} = strategy.mirror("
                                                   f"{model})` once the strategy exists"))
    return notes
