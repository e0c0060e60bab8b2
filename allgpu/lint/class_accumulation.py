"""PT006 across the methods of a trainer class: one method runs ``backward()`` on every call while another steps
the optimizer only every k calls (it returns early until a counter kept modulo k comes round), so gradients
accumulate over k calls; under DDP each of those backwards all-reduces. ParlAI's ``TorchAgent`` (a0504):
``backward()`` and ``update_params()`` (``self._number_grad_accum = (self._number_grad_accum + 1) % update_freq;
if self._number_grad_accum != 0: return``), its model wrapped in DistributedDataParallel by the subclasses in the
modules beside it."""

from __future__ import annotations

import ast

from allgpu.lint.accumulation import _always_runs
from allgpu.lint.resolve import iter_body_nodes
from allgpu.lint.torch_train import sync_controlled

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_DDP = ("DistributedDataParallel(", "DDP(")
CLASS_ACCUMULATION = ("backward() on every call while the class steps the optimizer every k calls, under DDP without "
                      "no_sync(): every micro-step all-reduces")


def class_accumulation_backwards(ctx, does) -> list[ast.Call]:
    """The unconditional backward of a method of each class (in this file) that has another method stepping the
    optimizer every k calls, when the class's model is wrapped in DDP: in this file, or by a subclass in a module
    of its project (the folder and its two parents). ``does(call, feature)`` says whether a call runs a
    ``"backward"`` / ``"optstep"``. Methods that decide when gradients sync (no_sync...) are not reported."""
    mod = ctx.mod
    out = []
    for cls in (n for n in ast.walk(mod.tree) if isinstance(n, ast.ClassDef)):
        methods = [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        steppers = [m for m in methods if _steps_every_k(mod, does, m)]
        if not steppers:
            continue
        for m in methods:
            calls = [n for n in iter_body_nodes(m.body) if isinstance(n, ast.Call)]
            if any(m is s for s in steppers) or any(does(c, "optstep") for c in calls):
                continue
            back = next((c for c in calls if does(c, "backward") and not _in_loop(mod, c, m)
                         and _always_runs(mod, does, c, m)), None)
            if back is not None and not sync_controlled(mod, back) and _wrapped_for(ctx, cls):
                out.append(back)
                break
    return out


def _in_loop(mod, node: ast.AST, fn: ast.AST) -> bool:
    return any(isinstance(a, _LOOPS) for a in _between(mod, node, fn))


def _steps_every_k(mod, does, fn: ast.AST) -> bool:
    """Every optimizer step of ``fn`` comes after an early ``return`` under a test on a counter kept modulo k (or
    a ``%`` in the test itself): ``if self._n != 0: return`` after ``self._n = (self._n + 1) % k``."""
    calls = [n for n in iter_body_nodes(fn.body) if isinstance(n, ast.Call)]
    steps = [c for c in calls if does(c, "optstep")]
    if not steps:
        return False
    gates = [n for n in ast.walk(fn) if isinstance(n, ast.If) and _returns(n.body) and _modulo_test(mod, n.test, fn)
             and not any(isinstance(a, _LOOPS) for a in _between(mod, n, fn))]
    return all(any(g.lineno < s.lineno for g in gates) for s in steps)


def _returns(body: list) -> bool:
    return any(isinstance(st, ast.Return) for st in body)


def _between(mod, node: ast.AST, fn: ast.AST):
    for anc in mod.ancestors(node):
        if anc is fn:
            return
        yield anc


def _modulo_test(mod, test: ast.expr, fn: ast.AST) -> bool:
    """A ``%`` in ``test``, or a name/attribute in it that ``fn`` binds to an expression with a ``%``."""
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            return True
        if isinstance(n, (ast.Name, ast.Attribute)) and any(
                any(a is fn for a in mod.ancestors(v)) and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)
                                                              for b in ast.walk(v)) for v in mod.values_of(n)):
            return True
    return False


def _wrapped_for(ctx, cls: ast.ClassDef) -> bool:
    """Is the class's model wrapped in DDP: in this file, or in a module of the project that subclasses it and
    wraps (``class TorchGeneratorAgent(TorchAgent): ... DistributedDataParallel(self.model, ...)``)?"""
    if ctx.torch.wrapped:
        return True
    importer = ctx.mod.importer
    if importer is None:
        return False
    for other in importer.users({cls.name}):
        if not any(w in other.source for w in _DDP):
            continue
        for sub in (n for n in ast.walk(other.tree) if isinstance(n, ast.ClassDef)):
            if any((getattr(b, "id", None) or getattr(b, "attr", None)) == cls.name for b in sub.bases):
                return True
    return False
