"""PT004 across modules: a trainer whose training loader, with its DistributedSampler, is built by another module
of the same project, and that no module gives ``set_epoch``.

Two flows, both from the trainer's side (the file with the epoch loop):

- the loader comes in as a parameter of the function holding the epoch loop (``def fit(self, train_loader,
  epochs)``), and a module of the project calls that function with a loader it built on a DistributedSampler;
- in a file that runs distributed training, the loader is an attribute of an object handed in (``for b in data.train_loader``, ``data`` from the trainer's
  package), and a module of the project (this folder, its two parents, or a folder beside this one) assigns an
  attribute of that name a loader built on a DistributedSampler (asv-subtools' ``libs/egs``, a0304).

Neither is reported when either module calls ``set_epoch`` or runs its own epoch loop, when the sampler does not
shuffle or is an evaluation sampler, or when the name is not a training loader's (``train_loader``,
``train_dataloader``).
"""

from __future__ import annotations

import ast

from allgpu.lint import torch_train
from allgpu.lint.resolve import dotted

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
        if not _names_epoch(outer) or mod.is_foreign(outer):
            continue
        for inner in ast.walk(outer):
            if inner is outer or not isinstance(inner, (ast.For, ast.AsyncFor)):
                continue
            it = _unwrap(inner.iter)
            name = (dotted(it) or "").rsplit(".", 1)[-1]
            if not _training_loader_name(name):
                continue
            where = None
            if isinstance(it, ast.Name):
                where = _from_caller(mod, outer, it.id)
            elif isinstance(it, ast.Attribute) and distributed and not mod.assigns.get(dotted(it)) and \
                    _handed_in(mod, it.value):
                where = _from_builder(mod, name)
            if where:
                out.append((inner, dotted(it), where))
    return out


def _names_epoch(loop: ast.AST) -> bool:
    head = loop.test if isinstance(loop, ast.While) else ast.Tuple(elts=[loop.target, loop.iter])
    return any("epoch" in (dotted(n) or "").lower() for n in ast.walk(head) if isinstance(n, (ast.Name, ast.Attribute)))


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


def _distributed_loader(fm, value: ast.expr) -> ast.Call | None:
    """``value`` (in module ``fm``) is a loader built with ``sampler=`` a shuffling training DistributedSampler:
    that sampler's call."""
    for v in ([value] if isinstance(value, ast.Call) else fm.values_of(value)[:4]):
        if not (isinstance(v, ast.Call) and "Loader" in (dotted(v.func) or "")):
            continue
        sampler = next((k.value for k in v.keywords if k.arg == "sampler"), None)
        for s in ([sampler] if isinstance(sampler, ast.Call) else fm.values_of(sampler)[:4]):
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
