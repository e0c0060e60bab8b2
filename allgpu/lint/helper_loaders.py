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


# ---- the other way round: this file is the project's data module, a training script elsewhere runs DDP --------

_EVAL_WORDS = ("val", "valid", "eval", "test", "predict", "infer", "inference", "calib")
_ENGINES = ("lightning", "pytorch_lightning", "accelerate", "deepspeed", "horovod", "ignite", "composer", "ray")


def runs_ddp(module, facts_of) -> bool:
    """A module of the project that trains under DDP (``facts_of``: ``rules_torch.TorchFacts``): it wraps a
    model, starts the process group, or launches ColossalAI (``colossalai.launch*`` starts torch.distributed)."""
    facts = facts_of(module)
    return facts.wrapped or facts.started or any((qn or "").startswith("colossalai.launch") for _, qn in module.calls)


def loaders_used_under_ddp(mod, facts_of) -> list[tuple[ast.Call, str]]:
    """``(loader call, user file name)`` for each DataLoader this file builds inside a function, with no sampler
    and no sign of ranks, that a module of the same project running DDP (:func:`runs_ddp`) calls by name:
    ``data_modules.py``'s ``TrainDataLoader()`` called by a ``train.py`` that launches DDP. The data module is
    where a DistributedSampler belongs, and where its authors put it.

    Bounded: only when this file does not import a library that shards loaders itself (Lightning, Accelerate...);
    users are the ``.py`` files of this file's folder and its two parents (``Importer.users``); the functions
    named are the loader's own and, one level up, those of this file that call it; a user counts when it calls one
    of them imported from this file's module, or by an attribute whose name says loader (``cfg.get_dataloaders()``).
    """
    if mod.importer is None or not hasattr(mod.importer, "users") or any(mod.is_imported(e) for e in _ENGINES):
        return []
    found: dict[str, list[ast.Call]] = {}
    for call, fn in _unsharded_loaders(mod):
        for name in _names_reaching(mod, fn):
            found.setdefault(name, []).append(call)
    if not found:
        return []
    out, seen = [], set()
    for user in mod.importer.users(set(found)):
        if not runs_ddp(user, facts_of) or any(user.is_imported(e) for e in _ENGINES) or \
                any("DistributedSampler" in (qn or "") for _, qn in user.calls):
            continue
        for name in _names_called(mod, user, set(found)):
            for call in found[name]:
                if id(call) not in seen:
                    seen.add(id(call))
                    out.append((call, getattr(user, "path", None) and user.path.name or "another module"))
    return out


def _unsharded_loaders(mod):
    """``(call, enclosing function)`` for this file's DataLoaders (or subclasses of it) built in a function
    with no sampler, no ``**kwargs``, no rank words in the function, shuffle not False, not evaluation-named."""
    for call, qn in mod.calls:
        if mod.is_foreign(call) or not _is_loader(mod, call, qn) or len(call.args) > 3:
            continue
        if any(k.arg is None for k in call.keywords):
            continue
        sampler = next((k.value for k in call.keywords if k.arg in ("sampler", "batch_sampler")), None)
        if sampler is not None and not (isinstance(sampler, ast.Constant) and sampler.value is None):
            continue
        shuffle = next((k.value for k in call.keywords if k.arg == "shuffle"), None)
        if isinstance(shuffle, ast.Constant) and not shuffle.value:
            continue
        fn = mod.enclosing_function(call)
        ds = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dataset"), None)
        if fn is None or torch_train.iterable_dataset(mod, ds) or torch_train.shards_by_rank(mod, ds):
            continue
        st = mod.parent.get(id(call))
        words = [fn.name.lower()] + [(dotted(t) or "").lower() for t in getattr(st, "targets", [])]
        parts = {p for w in words for p in w.replace(".", "_").split("_") if p}
        if any(p.startswith(("val", "eval", "test")) or p in _EVAL_WORDS for p in parts):
            continue
        if shuffle is None and not any("train" in w for w in words):
            continue  # neither shuffled nor named for training: an evaluation or inference loader
        idents = {n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else n.arg
                  for n in ast.walk(fn) if isinstance(n, (ast.Name, ast.Attribute, ast.arg))}
        if any(w in (i or "").lower() for i in idents for w in _SHARD_WORDS if w != "sampler"):
            continue
        yield call, fn


def _is_loader(mod, call: ast.Call, qn: str | None) -> bool:
    if qn in _LOADERS:
        return True
    cls = mod.local_class(call.func) if qn is None or "." not in qn else None
    return cls is not None and bool(set(_LOADERS) & mod.class_bases(cls))


def _names_reaching(mod, fn) -> set[str]:
    """``fn``'s name, and the names of this file's functions that call a function of that name."""
    names = {fn.name} if not fn.name.startswith("__") else set()
    for other in (d for defs in mod.functions.values() for d in defs):
        if other is not fn and not mod.is_foreign(other) and any(
                isinstance(n, ast.Call) and _last(n.func) == fn.name for n in ast.walk(other)):
            names.add(other.name)
    return {n for n in names if len(n) > 3}


def _names_called(mod, user, names: set[str]) -> set[str]:
    """Which of ``names`` ``user`` calls: imported from this file's module (by its name or its package's), or
    as an attribute whose name says loader."""
    path = getattr(mod.importer, "path", None)
    stems = {path.stem, path.parent.name} if path is not None else set()
    out = set()
    for call, qn in user.calls:
        name = _last(call.func)
        if name not in names:
            continue
        if isinstance(call.func, ast.Name):
            origin = (qn or "").rsplit(".", 1)[0].lstrip(".")
            if origin and set(origin.split(".")) & stems:
                out.add(name)
        elif "loader" in name.lower():
            out.add(name)
    return out


def _last(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
