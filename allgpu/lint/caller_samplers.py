"""PT004 across modules: a trainer whose training loader, with its DistributedSampler, is built by another module
of the same project, and that no module gives ``set_epoch``.

Two flows, both from the trainer's side (the file with the epoch loop):

- the loader comes in as a parameter of the function holding the epoch loop (``def fit(self, train_loader,
  epochs)``), and a module of the project calls that function with a loader it built on a DistributedSampler;
- the loader is what a function of another project module returns (``loader = build_loader(ds, bs)``), built there
  on a DistributedSampler that stays inside the helper;
- in a file that runs distributed training, the loader is an attribute of an object handed in (``for b in data.train_loader``, ``data`` from the trainer's
  package), and a module of the project (this folder, its two parents, or a folder beside this one) assigns an
  attribute of that name a loader built on a DistributedSampler (asv-subtools' ``libs/egs``, a0304).

A third: a class here overrides the method that a project base class's loader calls for its sampler
(``sampler=self._get_sampler()``) and returns a new DistributedSampler each time (ClassyVision's video datasets,
a0400/a0401).

None is reported when either module calls ``set_epoch`` or runs its own epoch loop, when the sampler does not
shuffle or is an evaluation sampler, or when the name is not a training loader's (``train_loader``,
``train_dataloader``).
"""

from __future__ import annotations

import ast

from allgpu.lint import torch_train
from allgpu.lint.project import Importer
from allgpu.lint.resolve import dotted
from allgpu.lint.set_epoch import _SELF_SETTING

_WRAPS = ("enumerate", "tqdm", "iter", "zip", "trange", "islice")
_DIST_WORDS = ("DistributedDataParallel", "torch.distributed", "init_process_group", "use_ddp", "is_distributed",
               "DistributedSampler")


def caller_built_loaders(mod) -> list[tuple[ast.AST, str, str]]:
    """``(loop, expression, where)``: each loop over a training loader whose DistributedSampler another module
    of the project builds and nobody sets the epoch of; ``where`` is ``"egs.py:169"``."""
    if mod.importer is None or "set_epoch" in mod.attrs:
        return []
    distributed = any(w in mod.source for w in _DIST_WORDS)
    out = []
    for outer in mod.loops:
        if not torch_train.epoch_loop(outer) or mod.is_foreign(outer):
            continue
        for inner in ast.walk(outer):
            if inner is outer or not isinstance(inner, (ast.For, ast.AsyncFor)):
                continue
            it = _unwrap(inner.iter)
            name = (dotted(it) or "").rsplit(".", 1)[-1]
            if not _training_loader_name(name):
                where = _from_helper(mod, it) if isinstance(it, ast.Name) else None
                if where:
                    out.append((inner, it.id, where))
                continue
            where = None
            if isinstance(it, ast.Name):
                where = _from_caller(mod, outer, it.id) or _from_helper(mod, it)
            elif isinstance(it, ast.Attribute) and distributed and (_relayed(mod, it) or not mod.assigns.get(
                    dotted(it)) and _handed_in(mod, it.value)):
                where = _from_builder(mod, name)
            if where:
                out.append((inner, dotted(it), where))
    return out


def _unwrap(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Call) and node.args and (dotted(node.func) or "").rsplit(".", 1)[-1] in _WRAPS:
        node = node.args[0]
    return node


def _training_loader_name(name: str) -> bool:
    low = name.lower()
    return "train" in low and "loader" in low


def _handed_in(mod, base: ast.expr) -> bool:
    """The object holding the loader is not built in this file by a call of its own (``data =
    self.elements["data"]``, a parameter, ``self`` whose attribute this file never assigns)."""
    values = mod.values_of(base)
    return not any(isinstance(v, ast.Call) and (mod.local_functions(v.func) or mod.local_class(v.func))
                   for v in values)


def _relayed(mod, it: ast.Attribute) -> bool:
    """``self.train_loader`` is only ever assigned the same-named attribute of another object
    (``self.train_loader = self.task_loader.train_loader``, Pythia's trainer): the loader is built elsewhere."""
    values = mod.assigns.get(dotted(it)) or []
    return bool(values) and all(isinstance(v, ast.Attribute) and v.attr == it.attr for v in values)


def _kwargs_samplers(fm, loader: ast.Call) -> list[ast.expr]:
    """What ``DataLoader(ds, **extra)`` gets as ``sampler`` through the dict ``extra``: ``extra["sampler"] = ...``
    in the same function, or in a local function that the same function hands ``extra`` to
    (``self._add_extra_args(task, extra)`` setting ``other_args["sampler"]``, Pythia's task loader)."""
    star = next((k.value for k in loader.keywords if k.arg is None and isinstance(k.value, ast.Name)), None)
    fn = fm.enclosing_function(loader)
    if star is None or fn is None:
        return []
    owners = {(id(fn), star.id)}
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        pos = next((i for i, a in enumerate(call.args) if isinstance(a, ast.Name) and a.id == star.id), None)
        for callee in (fm.local_functions(call.func) if pos is not None else [])[:1]:
            params = [a.arg for a in callee.args.args]
            shift = 1 if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute) else 0
            if pos + shift < len(params):
                owners.add((id(callee), params[pos + shift]))
    out = []
    for target, value in fm.subscript_assigns:
        key = target.slice
        if isinstance(target.value, ast.Name) and isinstance(key, ast.Constant) and key.value == "sampler":
            where = fm.enclosing_function(target)
            if where is not None and (id(where), target.value.id) in owners:
                out.append(value)
    return out


def _distributed_loader(fm, value: ast.expr) -> ast.Call | None:
    """``value`` (in module ``fm``) is a loader built with ``sampler=`` a shuffling training DistributedSampler
    (given directly, or through a ``**kwargs`` dict): that sampler's call."""
    for v in ([value] if isinstance(value, ast.Call) else fm.values_of(value)[:4]):
        if not (isinstance(v, ast.Call) and "Loader" in (dotted(v.func) or "")):
            continue
        sampler = next((k.value for k in v.keywords if k.arg == "sampler"), None)
        given = [sampler] if isinstance(sampler, (ast.Call, ast.IfExp)) else fm.values_of(sampler)[:4]
        given = [b for g in given for b in ((g.body, g.orelse) if isinstance(g, ast.IfExp) else (g,))]
        for s in given if sampler is not None else _kwargs_samplers(fm, v):
            if isinstance(s, ast.Call) and (fm.qualname(s.func) or dotted(s.func) or "").endswith("DistributedSampler"):
                shuffle = next((k.value for k in s.keywords if k.arg == "shuffle"), None)
                if not (isinstance(shuffle, ast.Constant) and shuffle.value is False) and \
                        not torch_train.evaluation_sampler(fm, s):
                    return s
    return None


def _sets_no_epoch(fm) -> bool:
    return "set_epoch" not in fm.attrs and not torch_train.has_epoch_loop(fm)


def _where(fm, node: ast.AST) -> str:
    path = getattr(fm, "path", None)
    return f"{path.name if path is not None else 'another module'}:{node.lineno}"


def _from_builder(mod, name: str) -> str | None:
    for fm in mod.importer.near({name, "DistributedSampler"}):
        if not _sets_no_epoch(fm):
            continue
        for target, values in fm.assigns.items():
            if target.rsplit(".", 1)[-1] != name or "." not in target:
                continue
            for v in values:
                s = _distributed_loader(fm, v)
                if s is not None:
                    return _where(fm, s)
    return None


def _from_helper(mod, it: ast.Name) -> str | None:
    """``loader = build_loader(...)``: a function of another project module returns a loader it builds on a
    shuffling training DistributedSampler, and neither it nor its module sets the epoch (the sampler stays inside
    the helper, so only ``loader.sampler.set_epoch(epoch)`` could)."""
    for v in mod.values_of(it)[:4]:
        if not isinstance(v, ast.Call) or mod.is_foreign(v):
            continue
        for fn in mod.local_functions(v.func)[:1]:
            fm = mod.owner(fn)
            if fm is None or "set_epoch" in fm.attrs:
                continue
            for r in (n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None):
                s = _distributed_loader(fm, r)
                if s is not None:
                    return _where(fm, s)
    return None


def _from_caller(mod, loop: ast.AST, param: str) -> str | None:
    fn = mod.enclosing_function(loop)
    if fn is None or param not in [a.arg for a in fn.args.args + fn.args.kwonlyargs]:
        return None
    params = [a.arg for a in fn.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    for fm in mod.importer.users({fn.name}):
        if not _sets_no_epoch(fm):
            continue
        for call, _ in fm.calls:
            if (dotted(call.func) or "").rsplit(".", 1)[-1] != fn.name:
                continue
            arg = next((k.value for k in call.keywords if k.arg == param), None)
            if arg is None and param in params and params.index(param) < len(call.args):
                arg = call.args[params.index(param)]
            s = _distributed_loader(fm, arg) if arg is not None else None
            if s is not None:
                return _where(fm, s)
    return None


def overriding_sampler_factories(mod) -> list[tuple[ast.Call, str]]:
    """``(sampler call, where)``: a method of a class here returns a new shuffling training DistributedSampler,
    and a base class of the project (up to three levels, other modules) builds its loader with
    ``sampler=self.<that method>(...)``; neither module calls ``set_epoch`` (ClassyVision's video datasets
    override ``_get_sampler`` that ``ClassyDataset.iterator()`` uses each phase, a0400/a0401)."""
    if mod.importer is None or "set_epoch" in mod.attrs:
        return []
    out = []
    for defs in mod.functions.values():
        for fn in defs:
            cls = mod.parent.get(id(fn))
            if not isinstance(cls, ast.ClassDef) or mod.is_foreign(fn) or not cls.bases:
                continue
            made = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
            made = [v for r in made for v in ([r] if isinstance(r, ast.Call) else mod.values_of(r)[:2])]
            samplers = [m for m in made if isinstance(m, ast.Call) and _shuffling_training_sampler(mod, m)]
            where = _base_loader_uses(mod, cls, fn.name, 0) if samplers else None
            out += [(s, where) for s in samplers if where]
    return out


def _shuffling_training_sampler(fm, s: ast.Call) -> bool:
    if not (fm.qualname(s.func) or dotted(s.func) or "").endswith("DistributedSampler"):
        return False
    shuffle = next((k.value for k in s.keywords if k.arg == "shuffle"), None)
    return not (isinstance(shuffle, ast.Constant) and shuffle.value is False) and not torch_train.evaluation_sampler(fm, s)


def _base_loader_uses(owner, cls: ast.ClassDef, method: str, depth: int, importer=None) -> str | None:
    importer = importer or owner.importer
    if depth > 2 or not hasattr(importer, "find_def"):
        return None
    for b in cls.bases:
        qn = owner.qualname(b) or ""
        module, _, name = qn.rpartition(".")
        found = importer.find_def(module, name) if module else None
        if found is None or not isinstance(found[1], ast.ClassDef):
            continue
        fm, base = found
        if "set_epoch" in fm.attrs:
            return None
        for call, qn2 in fm.calls:
            if not (qn2 or dotted(call.func) or "").endswith("DataLoader") or \
                    not any(a is base for a in fm.ancestors(call)):
                continue
            arg = next((k.value for k in call.keywords if k.arg == "sampler"), None)
            if isinstance(arg, ast.Call) and dotted(arg.func) == f"self.{method}":
                return _where(fm, call)
        path = getattr(fm, "path", None)
        deeper = _base_loader_uses(fm, base, method, depth + 1, Importer(path)) if path is not None else None
        if deeper:
            return deeper
    return None


def iterated_elsewhere(mod) -> list[tuple[ast.Call, str]]:
    """``(sampler call, where)``, from the builder's side: this module assigns an attribute with a training
    loader's name (``self.train_loader``) a loader built on a shuffling training DistributedSampler, runs no epochs
    and calls no ``set_epoch``; a module of the project that names this module's class (or this module) loops over
    an attribute of that name epoch after epoch and gives no sampler its epoch (Pythia's ``TaskLoader`` and
    trainer, a0700/a0701)."""
    if mod.importer is None or "set_epoch" in mod.attrs or torch_train.has_epoch_loop(mod) or \
            any(mod.is_imported(lib) for lib in _SELF_SETTING):
        return []
    out = []
    for target, values in mod.assigns.items():
        name = target.rsplit(".", 1)[-1]
        if "." not in target or not _training_loader_name(name):
            continue
        for v in values:
            s = None if mod.is_foreign(v) else _distributed_loader(mod, v)
            if s is None or mod.is_foreign(s):
                continue
            cls = next((a for a in mod.ancestors(v) if isinstance(a, ast.ClassDef)), None)
            path = getattr(mod, "path", None)
            keys = {cls.name} if cls is not None else {path.stem} if path is not None else set()
            where = _epoch_user(mod, name, keys) if keys else None
            if where:
                out.append((s, where))
    return out


def _epoch_user(mod, name: str, keys: set[str]) -> str | None:
    for fm in mod.importer.near({name}):
        if "set_epoch" in fm.attrs or not any(k in fm.source for k in keys) or \
                any(fm.is_imported(lib) for lib in _SELF_SETTING):
            continue
        for outer in fm.loops:
            if not torch_train.epoch_loop(outer):
                continue
            for inner in ast.walk(outer):
                if inner is not outer and isinstance(inner, (ast.For, ast.AsyncFor)) and \
                        (dotted(_unwrap(inner.iter)) or "").rsplit(".", 1)[-1] == name:
                    return _where(fm, inner)
    return None


def report_across_modules(ctx) -> None:
    """PT004's findings from the flows above, in ``ctx``'s file."""
    for call, where in iterated_elsewhere(ctx.mod):
        ctx.emit("PT004", call, f"this DistributedSampler's loader is looped over epoch after epoch in {where}, and "
                                "nothing gives it set_epoch(epoch): every epoch shuffles the same way; keep the "
                                "sampler and set its epoch at the start of each epoch")
    for loop, expr, where in caller_built_loaders(ctx.mod):
        ctx.emit("PT004", loop, f"`{expr}` is built with a DistributedSampler in {where}, and nothing gives it "
                                "set_epoch(epoch): every epoch shuffles the same way; set it at the start of each epoch")
    for call, where in overriding_sampler_factories(ctx.mod):
        ctx.emit("PT004", call, "each call returns a new DistributedSampler, used by the loader the base class builds "
                                f"in {where}, and nothing gives it set_epoch(epoch): every epoch shuffles the same way")
