"""PT004's samplers and epochs beyond the plain spelling: a project's own subclass of ``DistributedSampler`` (a
bucketing sampler that keeps the parent's epoch-seeded shuffle) is a DistributedSampler too, and a loop that runs
over the training loader again and again (``while step < max_steps: for batch in train_loader: ...``) is an epoch
loop even when no name in it says "epoch"."""

from __future__ import annotations

import ast

from allgpu.lint.resolve import dotted, iter_body_nodes

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_UNWRAP = ("enumerate", "iter", "tqdm", "islice", "zip")


def distributed_sampler(mod, call: ast.Call, qn: str | None) -> bool:
    """``call`` builds torch's DistributedSampler, or a project subclass of it (:func:`project_distributed_sampler`)."""
    return bool(qn and qn.startswith("torch.") and qn.endswith("DistributedSampler")) or \
        project_distributed_sampler(mod, call)


def project_distributed_sampler(mod, call: ast.Call) -> bool:
    """``call`` builds a class of this file or of a project module it imports that derives from torch's
    ``DistributedSampler`` and keeps its epoch-seeded order: it does not override ``__iter__``, or its
    ``__iter__`` reads ``self.epoch``."""
    cls = _class_of(mod, call.func)
    if cls is None:
        return False
    owner, node = cls
    if not any((owner.qualname(b) or "").startswith("torch.") and (owner.qualname(b) or "").endswith(
            "DistributedSampler") for b in node.bases):
        return False
    it = next((f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "__iter__"),
              None)
    return it is None or any(isinstance(n, ast.Attribute) and n.attr == "epoch" for n in ast.walk(it))


def _class_of(mod, func: ast.expr):
    """``(module, ClassDef)`` a call's callee names: a class of this file, or of the project module it imports."""
    if isinstance(func, ast.Name):
        for node in mod.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == func.id:
                return mod, node
    qn = mod.qualname(func)
    if not qn or "." not in qn or qn.startswith("torch.") or mod.importer is None:
        return None
    module, _, name = qn.rpartition(".")
    fm = mod.importer.load(module)
    if fm is None:
        return None
    node = next((n for n in fm.tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return (fm, node) if node is not None else None


def passes_over_loader(mod) -> bool:
    """A loop around a ``for`` over a training loader (a name or attribute that says ``loader``, or one bound to a
    ``DataLoader(...)``) whose body runs a backward: each pass of the outer loop is an epoch."""
    for outer in mod.loops:
        for inner in iter_body_nodes(outer.body):
            if isinstance(inner, (ast.For, ast.AsyncFor)) and _is_loader(mod, inner.iter) and any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
                    for n in iter_body_nodes(inner.body)):
                return True
    return _restarted_loader(mod)


def _restarted_loader(mod) -> bool:
    """A step loop that draws with ``next()`` and starts the loader over when it runs out (``except StopIteration:
    it = iter(train_loader)``) and runs a backward: each restart is a new pass over the data, an epoch."""
    for loop in mod.loops:
        nodes = list(iter_body_nodes(loop.body))
        if not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
                   for n in nodes):
            continue
        for h in (n for n in nodes if isinstance(n, ast.ExceptHandler)):
            if "StopIteration" in (dotted(h.type) or "") and any(
                    isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "iter" and c.args and
                    _is_loader(mod, c.args[0]) for c in ast.walk(h)):
                return True
    return False


def _is_loader(mod, node: ast.expr) -> bool:
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _UNWRAP and node.args:
        node = node.args[0]
    if isinstance(node, ast.Subscript):
        node = node.value
    name = (dotted(node) or "").lower()
    if any(w in name for w in ("val", "test", "eval")):
        return False
    if "loader" in name:
        return True
    return any(isinstance(v, ast.Call) and (mod.qualname(v.func) or "").endswith("DataLoader")
               for v in (mod.values_of(node) if name else []))
