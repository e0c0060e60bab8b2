"""TF007 when training's pipeline is handed to a project trainer that distributes it under a strategy of its own.

``dataset = inputter.make_training_dataset(files, train_config["batch_size"], ...)``;
``trainer = training.Trainer(checkpoint, devices=devices)``; ``trainer(dataset)``, where the project's ``Trainer``
(another module, or a class of this file) makes a ``MirroredStrategy`` and passes the dataset it is given to
``strategy.experimental_distribute_dataset``: the number the builder batches by is then the *global* batch, split
across the replicas (OpenNMT-tf's "Fix batch size in multiple GPU training"). The script itself makes no strategy,
so the rules that need one in the file never look. Reported at the builder's call when its batch is a configured
entry, a command-line option or a constant, and neither the call nor the batch's bindings scale it by a replica or
device count (``batch_multiplier=num_devices``, ``batch_size * num_gpus``).
"""

from __future__ import annotations

import ast
import functools
import os

from allgpu.lint.astutil import argument_for, in_test_case, iter_body_nodes
from allgpu.lint.batch_values import const_int
from allgpu.lint.binding import instance_class, maybe_instance
from allgpu.lint.config_batch import subscript_path
from allgpu.lint.resolve import dotted, kwarg

_STRATEGIES = ("MirroredStrategy", "TPUStrategy", "MultiWorkerMirroredStrategy", "CentralStorageStrategy")
_DISTRIBUTE = ("experimental_distribute_dataset", "distribute_dataset")
_SCALE_WORDS = ("replica", "multiplier", "num_devices", "num_gpus", "n_gpus", "gpu_count", "num_workers_per")
_BATCH_KEYS = ("batch_size", "train_batch_size")


def _makes_strategy(nodes) -> bool:
    return any(isinstance(n, ast.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1] in _STRATEGIES
               for body in nodes for n in ast.walk(body))


def _distributed_params(mod, fn: ast.FunctionDef) -> set[str]:
    """The parameters of ``fn`` that it passes (directly or rebound to themselves) to ``experimental_distribute_dataset``."""
    cache = mod.__dict__.setdefault("_distributed_params", {})
    if id(fn) not in cache:
        cache[id(fn)] = _find_distributed_params(fn)
    return cache[id(fn)]


def _find_distributed_params(fn: ast.FunctionDef) -> set[str]:
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    out = set()
    for node in iter_body_nodes(fn.body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DISTRIBUTE \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in params:
            out.add(node.args[0].id)
    return out


def _target(mod, call: ast.Call):
    """(function, its class or None) that ``call`` runs: ``trainer(ds)`` -> ``Trainer.__call__``,
    ``trainer.train(ds)`` -> ``Trainer.train``, ``run_training(ds)`` -> that function; None when unknown."""
    f = call.func
    obj, name = (f, "__call__") if isinstance(f, ast.Name) else (f.value, f.attr) if isinstance(f, ast.Attribute) \
        else (None, "")
    if obj is not None and maybe_instance(mod, obj, call):
        found = instance_class(mod, obj, call)
        if found is not None:
            cls = found[1]
            meth = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
            return (meth, cls) if meth is not None else None
    fns = mod.local_functions(f)
    return (fns[0], None) if fns else None


def _producer(mod, expr: ast.expr, at: ast.Call) -> ast.Call | None:
    """The call ``expr`` was last bound to before ``at`` in the same function (``dataset = build(...)``)."""
    if isinstance(expr, ast.Call):
        return expr
    if not isinstance(expr, ast.Name):
        return None
    scope = mod.enclosing_function(at) or mod.tree
    last = None
    for node in iter_body_nodes(scope.body):
        if isinstance(node, ast.Assign) and node.lineno < at.lineno and any(
                isinstance(t, ast.Name) and t.id == expr.id for t in node.targets):
            if last is None or node.lineno > last.lineno:
                last = node
    return last.value if last is not None and isinstance(last.value, ast.Call) else None


def _batch_argument(mod, builder: ast.Call) -> tuple[ast.expr, str] | None:
    """The builder's batch argument and how to name it: ``batch_size=...``, or a positional configured entry
    (``train_config["batch_size"]``) / option (``args.batch_size``)."""
    kw = kwarg(builder, "batch_size")
    candidates = [kw] if kw is not None else list(builder.args)
    for a in candidates:
        p = subscript_path(a)
        if p is not None and len(p) >= 2 and p[-1] in _BATCH_KEYS:
            return a, "the configuration's " + "".join(f"[{k!r}]" for k in p[1:])
        if isinstance(a, ast.Attribute) and a.attr in _BATCH_KEYS and isinstance(a.value, ast.Name):
            return a, f"option {dotted(a)}"
        if a is kw and const_int(mod, a) is not None:
            return a, f"{const_int(mod, a)}"
    return None


def _scaled(mod, builder: ast.Call, arg: ast.expr) -> bool:
    """The builder is told the replica count, or the batch is computed from one."""
    for k in builder.keywords:
        if any(w in (k.arg or "").lower() for w in _SCALE_WORDS) or any(
                w in (dotted(k.value) or "").lower() for w in _SCALE_WORDS):
            return True
    for v in [arg, *(mod.values_of(arg) if isinstance(arg, ast.Name) else [])]:
        if isinstance(v, ast.BinOp) or any(w in ast.unparse(v).lower() for w in _SCALE_WORDS):
            return True
    return isinstance(arg, ast.Name) and arg.id in mod.augassigned


def _imports_a_distributor(mod) -> bool:
    """Some project module this file imports names ``distribute_dataset`` (its text read, not parsed: a cheap test
    before resolving any call)."""
    if mod.importer is None:
        return False
    imp = mod.importer
    for q in set(mod.aliases.values()):
        parts = q.split(".")
        if parts[0] and not _local_root(str(imp.dir), parts[0]):
            continue  # ``scipy``, ``gin``: no module or package of that name in the project's folders
        for k in range(len(parts), 0, -1):  # ``pkg.training`` or ``pkg.training.Trainer``
            key = (str(imp.dir), ".".join(parts[:k]))  # the same answer for every file of a folder
            if key not in _LOCATED:
                if len(_LOCATED) > 65536:
                    _LOCATED.clear()
                path = imp.locate(key[1])
                _LOCATED[key] = None if path is None else str(path)
            path = _LOCATED[key]
            if path is not None and path != str(imp.path):
                if _names_distribute(path):
                    return True
                break
    return False


_LOCATED: dict[tuple[str, str], str | None] = {}


@functools.lru_cache(maxsize=16384)
def _local_root(folder: str, root: str) -> bool:
    """A module or package ``root`` in ``folder`` or its two parents (where :class:`Importer` looks)."""
    bases = [folder, os.path.dirname(folder), os.path.dirname(os.path.dirname(folder))]
    return any(os.path.exists(os.path.join(b, root + ".py")) or os.path.isdir(os.path.join(b, root)) for b in bases)


@functools.lru_cache(maxsize=4096)
def _names_distribute(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "distribute_dataset" in fh.read(1 << 20)
    except OSError:
        return False


def check_trainer_batch(ctx) -> None:
    """Report builders of pipelines that a project trainer distributes under the strategy it makes."""
    mod = ctx.mod
    if "batch_size" not in mod.source or "distribute_dataset" in mod.source or not _imports_a_distributor(mod):
        return  # the file distributes its own pipelines (the in-file rules follow those), or nothing it imports does
    seen: set[int] = set()
    for call, qn in list(mod.calls):
        if mod.is_foreign(call) or not call.args and not call.keywords or in_test_case(mod, call):
            continue
        if qn is not None and qn.split(".", 1)[0] in ("tf", "tensorflow", "keras", "np", "numpy", "os"):
            continue
        found = _target(mod, call)
        if found is None:
            continue
        fn, cls = found
        params = _distributed_params(mod, fn)
        if not params or not _makes_strategy([cls] if cls is not None else [fn]):
            continue
        for p in params:
            arg = argument_for(call, fn, p, bound=cls is not None)
            builder = _producer(mod, arg, call) if arg is not None else None
            if builder is None or id(builder) in seen:
                continue
            batch = _batch_argument(mod, builder)
            if batch is None or _scaled(mod, builder, batch[0]):
                continue
            seen.add(id(builder))
            where = cls.name if cls is not None else fn.name
            ctx.emit("TF007", builder, f"batch size {batch[1]} is the global batch: {where} "
                                       f"[{_file(mod, fn)}] hands this dataset to experimental_distribute_dataset "
                                       "under the strategy it makes, so with N replicas each GPU gets 1/N of it; "
                                       "scale it by the replica count (strategy.num_replicas_in_sync)")


def _file(mod, node) -> str:
    owner = mod.owner(node)
    return getattr(getattr(owner, "path", None), "name", None) or "this file"
