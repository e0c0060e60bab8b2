"""Small LibCST helpers the migration passes share: dotted names, parsing snippets, TensorFlow's aliases."""

from __future__ import annotations

import libcst as cst


def dotted(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a chain of names and attributes; None for anything else (a call, a subscript)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def expr(text: str) -> cst.BaseExpression:
    """An expression node from its source text."""
    return cst.parse_expression(text)


def statement(text: str) -> cst.BaseStatement:
    """A statement node from its source text (one statement, compound or simple)."""
    return cst.parse_statement(text)


def code(node: cst.CSTNode) -> str:
    """The source text of ``node`` alone."""
    return cst.Module(body=[]).code_for_node(node)


def tensorflow_aliases(module: cst.Module) -> dict[str, str]:
    """Local names bound to TensorFlow modules by ``import tensorflow [as tf]`` anywhere in ``module``:
    ``{"tf": "tensorflow"}``. ``from tensorflow... import`` names are handled where their import is rewritten."""
    found: dict[str, str] = {}

    class _Imports(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            for alias in node.names:
                name = dotted(alias.name) or ""
                if (name == "tensorflow" or name.startswith("tensorflow.")) and not name.startswith("tensorflow.keras"):
                    if alias.asname is not None:
                        found[alias.asname.name.value] = name
                    else:
                        found["tensorflow"] = "tensorflow"

    module.visit(_Imports())
    return found


def qualify(name: str | None, aliases: dict[str, str]) -> str | None:
    """``tf.keras.layers`` -> ``tensorflow.keras.layers`` when ``tf`` is a TensorFlow alias; else None."""
    if not name:
        return None
    head, _, rest = name.partition(".")
    if head not in aliases:
        return None
    return f"{aliases[head]}.{rest}" if rest else aliases[head]


def assigned_name(stmt: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``NAME = value`` as a simple statement line: ``(NAME, value)``; else None."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        assign = stmt.body[0]
        if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
            return assign.targets[0].target.value, assign.value
    return None
