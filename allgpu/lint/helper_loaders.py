"""Training DataLoaders built by a helper in another module of the project, for PT003: ``train_loader =
get_loader(args)`` in a DDP script, where ``data.py``'s ``get_loader`` returns ``DataLoader(ds, shuffle=True)``
with no sampler. The helper cannot know it runs under DDP; the script that calls it does.

Bounded: the helper is followed one level (``project.Importer``); it counts only when it returns the loader it
builds, shuffles it (a training loader), takes no sampler, never mentions a distributed sampler, a rank or a
shard anywhere in its body, and its dataset is not an IterableDataset.
"""

from __future__ import annotations

import ast

from allgpu.lint import torch_train
from allgpu.lint.project import LIBRARIES as _LIBRARIES
from allgpu.lint.resolve import dotted

_LOADERS = ("torch.utils.data.DataLoader", "torchdata.stateful_dataloader.StatefulDataLoader")
_SHARD_WORDS = ("sampler", "rank", "world", "shard", "replica", "distributed", "process_index", "num_processes")


def unsharded_loader_helpers(mod, wanted=lambda call: True) -> list[tuple[ast.Call, ast.FunctionDef]]:
    """``(call, helper)`` for each call in this file of a project helper from another module that returns a
    shuffled DataLoader with no sampler; only calls ``wanted(call)`` accepts are resolved (checked first)."""
    memo: dict[int, bool] = {}
    out = []
    for call, qn in mod.calls:
        if qn is None or qn.split(".")[0] in _LIBRARIES or mod.is_foreign(call) or not wanted(call):
            continue  # a helper imported from the project has a qualified name (``.data.get_loader``)
        for fn in mod.local_functions(call.func):
            if not mod.is_foreign(fn):
                continue
            if id(fn) not in memo:
                memo[id(fn)] = _returns_unsharded_loader(mod.owner(fn), fn)
            if memo[id(fn)]:
                out.append((call, fn))
    return out


def _returns_unsharded_loader(owner, fn) -> bool:
    if owner is None:
        return False
    for n in ast.walk(fn):
        text = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else \
            n.arg if isinstance(n, (ast.arg, ast.keyword)) and n.arg else ""
        if any(w in text.lower() for w in _SHARD_WORDS):
            return False
    returned = {dotted(n.value) for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None}
    returned_calls = {id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Return)}
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        if owner.qualname(call.func) not in _LOADERS or len(call.args) > 3:
            continue
        if any(k.arg is None for k in call.keywords):
            continue  # ``**kwargs``: a sampler may come through it
        shuffle = next((k.value for k in call.keywords if k.arg == "shuffle"), None)
        if not (isinstance(shuffle, ast.Constant) and shuffle.value is True):
            continue
        ds = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dataset"), None)
        if torch_train.iterable_dataset(owner, ds):
            continue
        st = owner.parent.get(id(call))
        names = {dotted(t) for t in st.targets} if isinstance(st, ast.Assign) else set()
        if id(call) in returned_calls or names & returned:
            return True
    return False
