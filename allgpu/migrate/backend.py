"""A script that picks Keras' backend itself: ``os.environ["KERAS_BACKEND"] = "tensorflow"`` (Keras' own
multi-GPU guide for TensorFlow opens so) becomes ``"torch"`` when the script distributes, since allgpu distributes
Keras on its PyTorch backend only (another one stops at the first model with ``UnsupportedError``). A script
without a strategy keeps its choice; a backend that is not a string literal is reported, not rewritten."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from allgpu.migrate.cst import dotted
from allgpu.migrate.notes import CHANGED, NOT_CONVERTED, Note

VARIABLE = "KERAS_BACKEND"


def _names_backend(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.SimpleString) and node.evaluated_value == VARIABLE


class _Backend(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[Note] = []

    def _torch(self, at: cst.CSTNode, value: cst.BaseExpression) -> cst.BaseExpression:
        line = self.get_metadata(PositionProvider, at).start.line
        if not isinstance(value, cst.SimpleString):
            self.notes.append(Note(line, NOT_CONVERTED, f"{VARIABLE} is set from an expression: allgpu distributes "
                                   "Keras on its PyTorch backend only; make it \"torch\""))
            return value
        if value.evaluated_value == "torch":
            return value
        self.notes.append(Note(line, CHANGED, f"{VARIABLE} {value.value} -> \"torch\": allgpu distributes Keras on "
                               f"its PyTorch backend only (on {value.value} the first model built in the scope stops "
                               "with UnsupportedError)"))
        return cst.SimpleString(value.value[0] + "torch" + value.value[-1]) if value.value[0] in "'\"" else \
            cst.SimpleString('"torch"')

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        for target in original.targets:
            sub = target.target
            if isinstance(sub, cst.Subscript) and dotted(sub.value) == "os.environ" and len(sub.slice) == 1 \
                    and isinstance(sub.slice[0].slice, cst.Index) and _names_backend(sub.slice[0].slice.value):
                return updated.with_changes(value=self._torch(original, updated.value))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if dotted(original.func) == "os.environ.setdefault" and len(updated.args) == 2 \
                and _names_backend(updated.args[0].value):
            value = self._torch(original, updated.args[1].value)
            return updated.with_changes(args=[updated.args[0], updated.args[1].with_changes(value=value)])
        return updated


def to_torch(module: cst.Module) -> tuple[cst.Module, list[Note]]:
    """``module`` with every literal ``KERAS_BACKEND`` it sets made ``"torch"``, and a note for each (line of
    ``module``, which is the original script's when run before any other pass)."""
    visitor = _Backend()
    result = MetadataWrapper(module).visit(visitor)
    return result, visitor.notes
