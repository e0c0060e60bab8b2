"""TF001 for moving averages: ``tf.train.ExponentialMovingAverage.apply`` creates the shadow variables the first
time it runs, so where a strategy exists, that first ``apply`` must run under ``strategy.scope()``.

The ``apply`` is traced up through the functions that reach it (``self.update()`` in a helper class's
``__init__``, the class built by a trainer method): when the outermost call site found is outside any
``with strategy.scope():`` and nothing on the way is a step given to ``strategy.run``, the shadow variables are
made outside the scope (OpenNMT-tf's ``MovingAverage`` built in its trainer, fixed by the authors in #736).
"""

from __future__ import annotations

import ast

from allgpu.lint.resolve import Module

_EMA = ("tensorflow.train.ExponentialMovingAverage", "tensorflow.compat.v1.train.ExponentialMovingAverage")
_DEPTH = 5


def check_ema(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if "apply" not in mod.attrs or "ExponentialMovingAverage" not in mod.source:
        return
    done: set[int] = set()
    for node in mod.attrs["apply"]:
        call = mod.parent.get(id(node))
        if not isinstance(call, ast.Call) or call.func is not node or mod.is_foreign(call):
            continue
        if not _is_ema(mod, node.value):
            continue
        site = _unscoped_root(mod, facts, call)
        if site is not None and id(site) not in done and not mod.is_foreign(site):
            done.add(id(site))
            ctx.emit("TF001", site, "the moving average's shadow variables are created by its first "
                                    "ExponentialMovingAverage.apply(), reached from here outside strategy.scope(): "
                                    "they live on one device; run the first update under the scope")


def _is_ema(mod: Module, receiver: ast.expr) -> bool:
    """``receiver`` holds a ``tf.train.ExponentialMovingAverage`` (``self._ema = tf.train....(decay)``)."""
    values = [receiver] if isinstance(receiver, ast.Call) else mod.values_of(receiver)[:4]
    return any(isinstance(v, ast.Call) and mod.qualname(v.func) in _EMA for v in values)


def _in_scope(mod: Module, facts, node: ast.AST) -> bool:
    for anc in mod.ancestors(node):
        if isinstance(anc, (ast.With, ast.AsyncWith)) and any(facts.is_scope_expr(i.context_expr) for i in anc.items):
            return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
    return False


def _unscoped_root(mod: Module, facts, call: ast.Call) -> ast.Call | None:
    """The outermost call site reaching ``call`` when none on the way is under a scope or run per replica;
    None when one is, or when no caller of the enclosing function can be found."""
    node, site = call, None
    for _ in range(_DEPTH):
        if _in_scope(mod, facts, node):
            return None
        fn = mod.enclosing_function(node)
        if fn is None:
            return site
        if id(fn) in facts.run_targets:
            return None
        callers = _callers(mod, fn)
        if not callers:
            return site
        if len(callers) > 1 and any(_in_scope(mod, facts, c) for c in callers):
            return None
        node = site = callers[0]
    return None


def _callers(mod: Module, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    """Calls of ``fn``: by name or ``self.name``, or, for an ``__init__``, the constructions of its class."""
    if fn.name != "__init__":
        return mod.callers(fn)
    cls = mod.parent.get(id(fn))
    if not isinstance(cls, ast.ClassDef):
        return []
    return [c for c, _ in mod.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name
            and mod.local_class(c.func) is cls]
