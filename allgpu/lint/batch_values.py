"""Where a batch size comes from, for TF007: a literal, a constant name, the default of a command-line option
(``flags.DEFINE_integer("batch_size", 256, ...)`` read as ``FLAGS.batch_size``, ``parser.add_argument(
"--batch-size", default=64)`` read as ``args.batch_size``), and the batching calls that are not ``.batch()``:
``ds.apply(tf.data.experimental.dense_to_ragged_batch(n))`` and a library loader's ``batch_size=`` whose
pipeline training consumes (``imagenet.load(split="train", batch_size=FLAGS.batch_size)``).
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.resolve import const_str, dotted, kwarg

_DEFINE_INT = ("absl.flags.DEFINE_integer", "tensorflow.flags.DEFINE_integer", "tensorflow.app.flags.DEFINE_integer",
               "tensorflow.compat.v1.flags.DEFINE_integer", "flags.DEFINE_integer")


def const_int(mod, node: ast.expr | None, _depth: int = 0) -> int | None:
    """An int literal, a name whose every assignment is the same int literal (or another such name:
    ``global_batch_size = per_worker_batch_size``), or an option's int default (read directly,
    ``FLAGS.batch_size``, or through a name every binding of which reads it)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        values = mod.values_of(node)
        if not values:  # ``from config import BATCH_SIZE``: the project module's constant
            return imported_constant(mod, node)
        if _depth < 4 and all(isinstance(v, ast.Name) and v.id != node.id for v in values):
            found = {const_int(mod, v, _depth + 1) for v in values}
            return found.pop() if len(found) == 1 else None
        ints = {v.value for v in values if isinstance(v, ast.Constant) and type(v.value) is int}
        if values and len(ints) == 1 and len(values) == sum(isinstance(v, ast.Constant) for v in values):
            return ints.pop()
        # ``batch_size = FLAGS.batch_size``: every binding reads the same command-line option
        reads = {v.attr for v in values if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name)}
        if values and len(reads) == 1 and len(values) == sum(isinstance(v, ast.Attribute) for v in values):
            return option_default(mod, reads.pop())
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        found = class_constant(mod, node)
        if found is None and not mod.values_of(node):
            found = imported_constant(mod, node)  # ``import config`` ... ``config.BATCH_SIZE``
        return found if found is not None else option_default(mod, node.attr)
    if isinstance(node, ast.Subscript):
        return dict_constant(mod, node)
    return None


def imported_constant(mod, node: ast.expr) -> int | None:
    """``BATCH_SIZE`` imported from a module of the project (``from config import BATCH_SIZE``, or
    ``config.BATCH_SIZE`` after ``import config``) whose every binding there is the same int literal, else None."""
    importer = getattr(mod, "importer", None)
    qn = mod.qualname(node) if importer is not None else None
    if not qn or "." not in qn.lstrip("."):
        return None
    module, _, name = qn.rpartition(".")
    fm = importer.load(module)
    values = fm.assigns.get(name, []) if fm is not None else []
    ints = {v.value for v in values if isinstance(v, ast.Constant) and type(v.value) is int}
    return ints.pop() if values and len(ints) == 1 and len(values) == sum(
        isinstance(v, ast.Constant) for v in values) else None


def class_constant(mod, node: ast.Attribute) -> int | None:
    """``CFG.batch_size`` where ``CFG`` is a class of the file whose body sets ``batch_size = 32`` once and nothing
    assigns ``CFG.batch_size`` later (a notebook's ``class CFG:`` settings block), else None."""
    if not isinstance(node.value, ast.Name) or mod.values_of(node):
        return None
    cls = mod.local_class(node.value)
    if cls is None or mod.is_foreign(cls):
        return None
    values = [st.value for st in cls.body if isinstance(st, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == node.attr for t in (st.targets if isinstance(st, ast.Assign) else [st.target]))]
    if len(values) == 1 and isinstance(values[0], ast.Constant) and type(values[0].value) is int:
        return values[0].value
    return None


def dict_constant(mod, node: ast.Subscript) -> int | None:
    """``config["batch_size"]`` where every binding of ``config`` is a dict literal giving that key the same int
    and nothing stores into ``config[...]`` or updates it, else None."""
    key = node.slice
    if not (isinstance(node.value, ast.Name) and isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return None
    values = mod.values_of(node.value)
    if not values or not all(isinstance(v, ast.Dict) for v in values):
        return None
    found = set()
    for d in values:
        hits = [v for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant) and k.value == key.value]
        if len(hits) != 1 or not (isinstance(hits[0], ast.Constant) and type(hits[0].value) is int):
            return None
        found.add(hits[0].value)
    changed = mod.__dict__.get("_dicts_changed")
    if changed is None:  # names stored into (``config["batch_size"] *= n``) or updated, once per file
        changed = mod.__dict__["_dicts_changed"] = {dotted(n.value) for n in ast.walk(mod.tree) if (
            isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)) or (
            isinstance(n, ast.Attribute) and n.attr in ("update", "setdefault", "__setitem__"))}
    return found.pop() if len(found) == 1 and node.value.id not in changed else None


def option_default(mod, name: str) -> int | None:
    """The int default of the one command-line option called ``name`` (absl/tf flags or argparse), else None."""
    cache = mod.__dict__.setdefault("_option_defaults", None)
    if cache is None:
        cache = mod.__dict__["_option_defaults"] = _options(mod)
    found = cache.get(name) or _imported_options(mod).get(name, [])
    return found[0] if len(found) == 1 else None


def _imported_options(mod) -> dict[str, list[int]]:
    """The int options defined in the project modules this file imports (``from utils import flags_def``: absl
    flags are global, so a flag defined there is read here as ``FLAGS.batch_size``)."""
    cache = mod.__dict__.get("_imported_option_defaults")
    if cache is not None:
        return cache
    out: dict[str, list[int]] = {}
    importer = getattr(mod, "importer", None)
    for target in set(getattr(mod, "aliases", {}).values()) if importer is not None else ():
        for name in {target, target.rpartition(".")[0]} - {""}:
            fm = importer.load(name)
            if fm is not None and fm is not mod:
                for k, v in _options(fm).items():
                    out.setdefault(k, []).extend(v)
    mod.__dict__["_imported_option_defaults"] = out
    return out


def _options(mod) -> dict[str, list[int]]:
    out: dict[str, list] = {}
    for call, qn in mod.calls:
        f = call.func
        if qn in _DEFINE_INT or (isinstance(f, ast.Attribute) and f.attr == "DEFINE_integer"):
            name = const_str(call.args[0]) if call.args else const_str(kwarg(call, "name"))
            default = call.args[1] if len(call.args) > 1 else kwarg(call, "default")
        elif isinstance(f, ast.Attribute) and f.attr == "add_argument":
            flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            longs = [s for s in flags if s.startswith("--")] or flags
            name = const_str(kwarg(call, "dest")) or (longs[0].lstrip("-").replace("-", "_") if longs else None)
            default = kwarg(call, "default")
        else:
            continue
        if name:
            value = default.value if isinstance(default, ast.Constant) and type(default.value) is int else None
            out.setdefault(name, []).append(value)
    return {k: v for k, v in out.items() if None not in v}


def applied_batch(mod, call: ast.Call) -> ast.expr | None:
    """The size of ``ds.apply(tf.data.experimental.dense_to_ragged_batch(n))`` (any ``*batch*`` transformation
    given to ``apply``), else None."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "apply" and call.args and isinstance(call.args[0], ast.Call)):
        return None
    inner = call.args[0]
    name = (mod.qualname(inner.func) or dotted(inner.func) or "").rsplit(".", 1)[-1]
    if "batch" not in name or "unbatch" in name or "rebatch" in name:
        return None
    return inner.args[0] if inner.args else kwarg(inner, "batch_size")


def loader_batch(mod, expr: ast.expr | None, depth: int = 0) -> ast.Call | None:
    """The call of a library loader that made ``expr`` (through names) with a ``batch_size=`` keyword: a pipeline
    made elsewhere, batched by that argument. Local functions are followed by the .batch() rule instead."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, ast.Name):  # ``ds = loader(...); ds = ds.map(augment)``: every binding leads to one loader
        found = {id(c): c for c in (loader_batch(mod, v, depth + 1) for v in mod.values_of(expr)[:6]) if c}
        return next(iter(found.values())) if len(found) == 1 else None
    if not isinstance(expr, ast.Call):
        return None
    f = expr.func
    if isinstance(f, ast.Attribute) and f.attr in _DATASET_STEPS:
        return loader_batch(mod, f.value, depth + 1)
    if isinstance(f, ast.Attribute) and f.attr in ("batch", "padded_batch"):
        return None  # ``ds.batch(batch_size=64)``: the .batch() rule reports it
    if kwarg(expr, "batch_size") is not None and not mod.local_functions(f):
        qn = mod.qualname(f) or ""
        if not qn.startswith(("tensorflow.", "keras.", "numpy.")) or qn.rsplit(".", 1)[-1] in _TF_LOADERS:
            return expr
    return None


_TF_LOADERS = frozenset({"image_dataset_from_directory", "text_dataset_from_directory", "audio_dataset_from_directory",
                         "timeseries_dataset_from_array", "make_csv_dataset", "make_batched_features_dataset"})
"""TensorFlow's and Keras's own functions that return a pipeline already batched by their ``batch_size=``."""

_DATASET_STEPS = frozenset({"map", "shuffle", "prefetch", "repeat", "cache", "filter", "with_options", "take",
                            "apply", "unbatch", "shard"})


def named_global(node: ast.expr | None, mod=None) -> bool:
    """``GLOBAL_BATCH_SIZE``: the author says the constant is the global batch, split across replicas on purpose.
    Not when every binding of the name is a per-replica name taken as it is (``global_batch_size =
    per_worker_batch_size``: the author says one worker's batch is the global one)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    if "global" not in name.lower():
        return False
    values = mod.values_of(node) if mod is not None and isinstance(node, ast.Name) else []
    return not (values and all(isinstance(v, ast.Name) and PER_REPLICA.search(v.id) for v in values))


PER_REPLICA = re.compile(r"per_?(worker|replica|device|gpu|core|tpu|accelerator)", re.I)


def per_replica_context(mod, call: ast.Call) -> bool:
    """Inside an input function that receives an ``input_context`` (``distribute_datasets_from_function``,
    ``create_per_worker_dataset``): its batch is per replica or per worker by definition."""
    fn = mod.enclosing_function(call)
    while fn is not None:
        args = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        if any("context" in a or a == "ctx" for a in args) or "_" in args and fn.name != "main":
            return True  # absl's ``def main(_)`` given to ``app.run`` is not an input function
        fn = mod.enclosing_function(fn)
    return False
