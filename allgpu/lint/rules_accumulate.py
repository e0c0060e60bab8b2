"""AG005: a loss divided by the micro-batch count that ``strategy.accumulate(k)`` already averages over.

DDP's accumulation idiom (``model.no_sync()`` / nanoGPT's ``model.require_backward_grad_sync``) sums the
micro-batches' gradients, so scripts divide each micro-batch's loss by ``k`` (``loss = loss /
gradient_accumulation_steps``). allgpu's :meth:`~allgpu.Strategy.accumulate` divides the summed gradients by
``k`` itself (one batch ``k`` times larger), so a script ported with that line kept trains on gradients ``k``
times too small, silently: the same loss curve shape, a learning rate divided by ``k`` (less under Adam, through
``eps`` and gradient clipping). Found by porting karpathy/nanoGPT's train.py to allgpu.
"""

from __future__ import annotations

import ast

from allgpu.lint.resolve import dotted


def _accumulate_counts(mod) -> dict[int, tuple[ast.AST, set[str]]]:
    """Per scope (a function, or the module): the divisor texts of its ``<strategy>.accumulate(k)`` calls."""
    out: dict[int, tuple[ast.AST, set[str]]] = {}
    for call, _ in mod.calls:
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "accumulate" and len(call.args) == 1
                and not call.keywords):
            continue
        arg = call.args[0]
        text = dotted(arg) or (repr(arg.value) if isinstance(arg, ast.Constant) and isinstance(arg.value, int)
                               and not isinstance(arg.value, bool) and arg.value > 1 else None)
        if text:
            scope = mod.enclosing_function(call) or mod.tree
            out.setdefault(id(scope), (scope, set()))[1].add(text)
    return out


def _divisor(node: ast.AST) -> ast.expr | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return node.right
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div):
        return node.value
    return None


def _text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return repr(node.value)
    return dotted(node)


def _loss_like(mod, node: ast.AST) -> bool:
    """The divided value, or the name it is assigned to, names a loss (``loss``, ``outputs.loss``, ``loss_fn(...)``)."""
    names = [node.left if isinstance(node, ast.BinOp) else node.target]
    parent = next(mod.ancestors(node), None)
    if isinstance(parent, ast.Assign):
        names += parent.targets
    for target in names:
        while isinstance(target, ast.Call):
            target = target.func
        if "loss" in (dotted(target) or "").lower():
            return True
    return False


def check_ag005(ctx) -> None:
    """Flag ``loss / k`` (or ``loss /= k``) in the function that calls ``strategy.accumulate(k)``."""
    mod = ctx.mod
    if not ctx.facts.has_strategy("allgpu", multi_device=False):
        return
    for scope, texts in _accumulate_counts(mod).values():
        for node in ast.walk(scope):
            right = _divisor(node)
            if right is None or _text(right) not in texts or not _loss_like(mod, node):
                continue
            if scope is mod.tree and mod.enclosing_function(node) is not None:
                continue
            text = _text(right)
            ctx.emit("AG005", node, f"loss divided by `{text}`, the micro-batch count given to "
                                    f"strategy.accumulate({text}), which already averages the gradients over its "
                                    f"micro-batches: they end up {text} times too small; drop the division")
