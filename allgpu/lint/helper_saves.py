"""Checkpoint writes through the project's own objects, for PT007: ``checkpoint_handler.save(state, epoch)`` where
``checkpoint_handler`` is an instance of a class of this file or of a module it imports (``from .checkpoint import
CheckpointHandler``) whose ``save`` method reaches ``torch.save``, directly, through ``self.other()`` or through an
attribute holding another such object (``self.io = CheckpointIO(...)``; ``self.io.save(...)``).

Bounded: methods named for writing (save, checkpoint, snapshot, dump, write, export...) at the call site, three
method hops inside, classes found by ``x = Cls(...)``, ``self.x = Cls(...)`` or an annotation
(``def train(handler: CheckpointHandler)``); a write under a rank test inside the methods, or to a per-rank
file, is not one every rank makes. Library objects (DeepSpeed's engine, torch.distributed.checkpoint) are never
followed, nor a method that runs a collective or distributed checkpointing, nor one of a class that tests the
rank itself (it decides per rank, so every rank must call it). Classes of
the checked file itself are left to PT007's reading of their own torch.save.
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.binding import instance_class, maybe_instance
from allgpu.lint.rank_guard import COLLECTIVES, guarded, rank_aware_class, rankish
from allgpu.lint.resolve import dotted

_MAX_HOPS = 3
# methods followed into other modules (each costs a parse of that module): the ones named for writing
_SAVE_WORDS = re.compile(r"(?i)save|checkpoint|ckpt|snapshot|dump|write|export|persist")


def object_saves(mod, wanted=lambda call: True) -> list[tuple[ast.Call, str]]:
    """``(call, where)`` for each call in this file of a project object's method that writes with torch.save on
    every process that calls it; ``where`` names the method (``CheckpointHandler.save in checkpoint.py``). Only
    calls ``wanted(call)`` accepts are resolved (checked first: resolving parses the project's modules)."""
    out, memo = [], {}
    for call, qn in mod.calls:
        func = call.func
        if qn is not None or not isinstance(func, ast.Attribute) or mod.is_foreign(call):
            continue
        if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            continue  # the file's own methods: PT007 reads their torch.save where it is
        if not _SAVE_WORDS.search(func.attr) or not isinstance(func.value, (ast.Name, ast.Attribute)) or \
                not maybe_instance(mod, func.value, call) or not wanted(call):
            continue
        found = instance_class(mod, func.value, call)
        if found is None:
            continue
        owner, cls = found
        if owner is mod:
            continue  # a class of this file: PT007 reads its torch.save where it is
        if _method_saves(owner, cls, func.attr, 0, memo):
            where = f"{cls.name}.{func.attr}" + (f" in {owner.path.name}" if getattr(owner, "path", None) else "")
            out.append((call, where))
    return out


def _under_predicate(mod, node: ast.AST, fn: ast.AST) -> bool:
    """Under ``if is_logging_process():`` (an argument-less ``is_``/``should_`` predicate this module imports from
    a module not followed): it may well test the rank, so the write is not counted as every rank's."""
    for anc in mod.ancestors(node):
        if anc is fn:
            return False
        if isinstance(anc, ast.If):
            for n in ast.walk(anc.test):
                if isinstance(n, ast.Call) and not n.args and not mod.local_functions(n.func):
                    name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                    if name.lstrip("_").startswith(("is_", "should_")):
                        return True
    return False


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
        if not isinstance(node, ast.Call) or guarded(mod, node, depth=_MAX_HOPS) or _under_predicate(mod, node, fn):
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
