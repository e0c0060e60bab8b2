"""Checkpoint writes through the project's own objects, for PT007: ``checkpoint_handler.save(state, epoch)`` where
``checkpoint_handler`` is an instance of a class of this file or of a module it imports (``from .checkpoint import
CheckpointHandler``) whose ``save`` method reaches ``torch.save``, directly, through ``self.other()`` or through an
attribute holding another such object (``self.io = CheckpointIO(...)``; ``self.io.save(...)``).

Bounded: three method hops, classes found by ``x = Cls(...)``, ``self.x = Cls(...)`` or an annotation
(``def train(handler: CheckpointHandler)``); a write under a rank test inside the methods, or to a per-rank
file, is not one every rank makes. Library objects (DeepSpeed's engine, torch.distributed.checkpoint) are never
followed, nor a method that runs a collective or distributed checkpointing, nor one of a class that tests the
rank itself (it decides per rank, so every rank must call it). Classes of
the checked file itself are left to PT007's reading of their own torch.save.
"""

from __future__ import annotations

import ast

from allgpu.lint.binding import instance_class
from allgpu.lint.rank_guard import COLLECTIVES, guarded, rank_aware_class, rankish
from allgpu.lint.resolve import dotted

_MAX_HOPS = 3


def object_saves(mod) -> list[tuple[ast.Call, str]]:
    """``(call, where)`` for each call in this file of a project object's method that writes with torch.save on
    every process that calls it; ``where`` names the method (``CheckpointHandler.save in checkpoint.py``)."""
    cached = mod.__dict__.get("_object_saves")
    if cached is not None:
        return cached
    out, memo = [], {}
    for call, qn in mod.calls:
        func = call.func
        if qn is not None or not isinstance(func, ast.Attribute) or mod.is_foreign(call):
            continue
        if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            continue  # the file's own methods: PT007 reads their torch.save where it is
        found = instance_class(mod, func.value, call)
        if found is None:
            continue
        owner, cls = found
        if owner is mod:
            continue  # a class of this file: PT007 reads its torch.save where it is
        if _method_saves(owner, cls, func.attr, 0, memo):
            where = f"{cls.name}.{func.attr}" + (f" in {owner.path.name}" if getattr(owner, "path", None) else "")
            out.append((call, where))
    mod.__dict__["_object_saves"] = out
    return out


def _method(cls: ast.ClassDef, name: str):
    return next((f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name),
                None)


def _method_saves(mod, cls: ast.ClassDef, name: str, hops: int, memo: dict) -> bool:
    key = (id(cls), name)
    if key in memo:
        return memo[key]
    memo[key] = False  # recursion guard
    fn = _method(cls, name)
    if fn is None or hops > _MAX_HOPS or rank_aware_class(mod, fn):
        return False  # a class that tests the rank itself (``if self._is_rank_zero:``) is meant for every rank
    saves = False
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or guarded(mod, node, depth=_MAX_HOPS):
            continue  # under a rank test inside the method (depth: the method's own callers are not asked)
        qn = mod.qualname(node.func) or ""
        if qn.startswith("torch.distributed.") and (qn.rsplit(".", 1)[-1] in COLLECTIVES or ".checkpoint" in qn):
            saves = False  # a helper that runs collectives or distributed checkpointing is called by every rank
            break
        if saves:
            continue
        if qn == "torch.save":
            saves = not (len(node.args) > 1 and rankish(node.args[1]))
        elif isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name) and target.id == "self":
                saves = _method_saves(mod, cls, node.func.attr, hops + 1, memo)
            elif dotted(target) and dotted(target).startswith("self."):
                found = instance_class(mod, target, node)
                saves = found is not None and _method_saves(found[0], found[1], node.func.attr, hops + 1, memo)
    memo[key] = saves
    return saves
