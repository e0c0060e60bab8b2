"""Where PT004 looks for ``set_epoch``: is it given at the start of every epoch, or once?

PT004's definition (and PyTorch's DistributedSampler documentation) asks for ``sampler.set_epoch(epoch)`` at the
beginning of each epoch. A file that calls it once (at setup, or before the epoch loop) shuffles every epoch the
same way, like one that never calls it. A call counts as per-epoch when it is inside any loop, in a lambda or a
decorated function (an event handler: ``@trainer.on(Events.EPOCH_STARTED)``), in a function whose name says epoch
(``train_one_epoch``, ``on_epoch_begin``, ``on_train_epoch_start``), in a function passed somewhere as a value (a
callback), in a function nothing in the file calls (its caller is elsewhere), or in a function called from a
per-epoch place. It counts as once when it is at module level, or outside every loop of the function that runs
the epochs (an epoch loop, or ``engine.run(loader, max_epochs=n)``), or in a function called only from such places.

Files using a library that sets the epoch itself (Lightning, Accelerate, Composer, transformers' Trainer) are
left alone, as are ``set_epoch`` attributes not called (``hasattr(s, "set_epoch")``, ``fn = s.set_epoch``).
"""

from __future__ import annotations

import ast

from allgpu.lint.resolve import dotted
from allgpu.lint.torch_train import epoch_loop, names_epoch

_SELF_SETTING = ("lightning", "pytorch_lightning", "accelerate", "composer", "transformers.Trainer",
                 "transformers.trainer", "ray.train", "determined")
_EPOCH_KWARGS = ("max_epochs", "num_epochs", "n_epochs", "epochs", "nb_epochs", "total_epochs")
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_DEPTH = 4


def once_set_epochs(mod) -> list[ast.Call]:
    """The ``set_epoch(...)`` calls of this file when none of them runs per epoch and the file runs several
    epochs; [] otherwise (a per-epoch call exists, an uncalled reference, a library that sets the epoch)."""
    nodes = [a for a in mod.attrs.get("set_epoch", []) if not mod.is_foreign(a)]
    if not nodes or any(mod.is_imported(lib) for lib in _SELF_SETTING):
        return []
    calls = []
    for a in nodes:
        call = mod.parent.get(id(a))
        if not (isinstance(call, ast.Call) and call.func is a):
            return []  # ``hasattr(sampler, "set_epoch")`` or ``hook = sampler.set_epoch``: used some other way
        if not _sampler_like(mod, a.value):
            return []  # ``criterion.set_epoch(e)``: not a sampler this rule knows
        calls.append(call)
    if any(_per_epoch(mod, c, 0) for c in calls) or not runs_epochs(mod):
        return []
    return calls


def runs_epochs(mod, fn: ast.AST | None = None) -> bool:
    """``fn`` (or the file) holds an epoch loop (``for epoch in range(n)``) or a run of several epochs
    (``trainer.run(loader, max_epochs=n)``)."""
    loops = [lp for lp in mod.loops if fn is None or _inside(mod, lp, fn)]
    if any(epoch_loop(loop) for loop in loops):
        return True
    for call, _ in mod.calls:
        if (fn is None or _inside(mod, call, fn)) and any(k.arg in _EPOCH_KWARGS for k in call.keywords) and \
                isinstance(call.func, ast.Attribute) and call.func.attr in ("run", "fit", "train"):
            return True
    return False


def _sampler_like(mod, receiver: ast.expr) -> bool:
    text = (dotted(receiver) or "").lower()
    if "sampler" in text:
        return True
    return "loader" in text and "DistributedSampler" in mod.source or any(
        isinstance(v, ast.Call) and (mod.qualname(v.func) or "").endswith("DistributedSampler")
        for v in mod.values_of(receiver))


def _inside(mod, node: ast.AST, fn: ast.AST) -> bool:
    return any(a is fn for a in mod.ancestors(node))


def _per_epoch(mod, node: ast.AST, depth: int) -> bool:
    """``node`` (a call) runs at every epoch, or may: see the module docstring."""
    if depth > _DEPTH:
        return True
    fn = None
    for a in mod.ancestors(node):
        if isinstance(a, _LOOPS):
            return True
        if isinstance(a, _FUNCS):
            fn = a
            break
    if fn is None:
        return False  # module level: runs once
    if isinstance(fn, ast.Lambda) or fn.decorator_list or "epoch" in fn.name.lower():
        return True
    if runs_epochs(mod, fn):
        return False  # the function that runs the epochs, outside its loops
    if _referenced(mod, fn):
        return True  # passed as a callback: called when, the file does not say
    callers = mod.callers(fn)
    return not callers or any(_per_epoch(mod, c, depth + 1) for c in callers)


def _referenced(mod, fn: ast.AST) -> bool:
    """``fn``'s name is read other than as a call's function (``add_event_handler(Events.X, fn)``)."""
    for n in mod.name_nodes.get(fn.name, []) + mod.attrs.get(fn.name, []):
        if isinstance(n.ctx, ast.Load):
            parent = mod.parent.get(id(n))
            if not (isinstance(parent, ast.Call) and parent.func is n):
                return True
    return False


def reseeded_each_epoch(mod, sampler: ast.Call) -> bool:
    """``DistributedSampler(ds, seed=base + epoch)`` (a seed naming the epoch) built at every epoch (in a loop,
    or a function called from one): each epoch draws a new permutation without set_epoch."""
    seed = next((k.value for k in sampler.keywords if k.arg == "seed"), None)
    if seed is None or not names_epoch(seed):
        return False  # ``seed=args.seed``: the same seed every time
    return any(isinstance(a, _LOOPS) for a in mod.ancestors(sampler)) or _per_epoch(mod, sampler, 0)
