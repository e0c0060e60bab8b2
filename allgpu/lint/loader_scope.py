"""Loaders PT003 leaves alone although they have no DistributedSampler: the single-process branch of an ``if``
whose other branch builds one, and an evaluation loader that one rank alone reads."""

from __future__ import annotations

import ast

from allgpu.lint.rank_guard import is_job_guard, one_branch
from allgpu.lint.resolve import dotted
from allgpu.lint.torch_train import _EVAL_WORD


def single_process_branch(mod, call: ast.Call) -> bool:
    """``call`` (a loader without a sampler) is in one branch of an ``if`` whose other branch builds a
    DistributedSampler: ``if args.distributed: sampler = DistributedSampler(ds) ... else: DataLoader(ds,
    shuffle=True)`` is the single-process path (Habana's MNIST example)."""
    for a in mod.ancestors(call):
        if isinstance(a, ast.If):
            inside = a.body if any(call is n for s in a.body for n in ast.walk(s)) else a.orelse
            other = a.orelse if inside is a.body else a.body
            if any(isinstance(n, ast.Call) and (mod.qualname(n.func) or dotted(n.func) or "").endswith(
                    "DistributedSampler") for s in other for n in ast.walk(s)):
                return True
    return False


def one_rank_evaluation(mod, call: ast.Call, names: list[str | None]) -> bool:
    """A shuffled loader bound only to evaluation names (``test_loader``, ``val_dl``) and built under a rank guard
    (``if rank == 0:``), or used only there: one process evaluates, nothing is read twice (SageMaker's SMDDP MNIST
    example; Princeton's MNIST at HEAD). Unguarded,
    every rank evaluates the whole set, which the corpus counts (deit's a0025; Princeton's follow-up c560ac0)."""
    words = [[w for w in n.rsplit(".", 1)[-1].split("_") if w] for n in names if n]
    if not (words and all(any(_EVAL_WORD.match(w) for w in ws) for ws in words)):
        return False
    if _under_job_guard(mod, call):
        return True
    fn = mod.enclosing_function(call)
    loads = [n for name in names if name and "." not in name for n in mod.name_nodes.get(name, [])
             if isinstance(n.ctx, ast.Load) and mod.enclosing_function(n) is fn]
    return bool(loads) and all(_under_job_guard(mod, n) for n in loads)  # ``if rank == 0: test(model, test_loader)``


def _under_job_guard(mod, node: ast.AST) -> bool:
    """``node`` is in the guarded branch of an enclosing ``if rank == 0:``."""
    child = node
    for anc in mod.ancestors(node):
        if isinstance(anc, ast.If) and is_job_guard(anc.test, mod) and \
                one_branch(anc.test) in (None, any(child is st for st in anc.body)):
            return True
        child = anc
    return False


def unprepared_loaders(mod, trained) -> list[tuple[ast.Call, str]]:
    """``(loader call, user)``: under Accelerate (a file that hands its model to ``accelerator.prepare``), a
    DataLoader with no sampler of its own that no ``prepare`` call is given and that a training loop iterates
    (``trained(call)``): Accelerate shards only the loaders it prepares, so every process reads all of this one."""
    if not mod.is_imported("accelerate"):
        return []
    prepares = [c for c, _ in mod.calls if isinstance(c.func, ast.Attribute) and c.func.attr in (
        "prepare", "prepare_data_loader") and c.args and any(
        isinstance(v, ast.Call) and mod.qualname(v.func) == "accelerate.Accelerator" for v in mod.values_of(c.func.value))]
    if not prepares:
        return []
    given = {dotted(a) for c in prepares for a in c.args if dotted(a)}
    out = []
    for call, qn in mod.calls:
        if not (qn or "").endswith("DataLoader") or mod.is_foreign(call) or any(
                k.arg in ("sampler", "batch_sampler", None) for k in call.keywords) or len(call.args) > 3:
            continue
        parent = mod.parent.get(id(call))
        names = [dotted(t) for t in parent.targets] if isinstance(parent, ast.Assign) else []
        if names and not any(n in given for n in names) and trained(call):
            out.append((call, "a training loop under Accelerate that never passes it to `accelerator.prepare`"))
    return out
