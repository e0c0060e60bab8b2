"""Is an expression a ``tf.data`` pipeline, a distributed dataset, or something else?"""

from __future__ import annotations

import ast
import re

from allgpu.lint.facts import DISTRIBUTE_ATTRS
from allgpu.lint.astutil import base_name, passed_to
from allgpu.lint.tfdata_calls import _callable_returns, _returned, _unpacked_from
from allgpu.lint.resolve import Module, dotted, iter_body_nodes

_TFDATA_METHODS = frozenset({
    "batch", "map", "shuffle", "prefetch", "repeat", "take", "skip", "cache", "filter", "padded_batch",
    "unbatch", "interleave", "flat_map", "apply", "with_options", "shard", "rebatch", "zip", "concatenate",
    "ragged_batch", "bucket_by_sequence_length", "enumerate", "window", "snapshot",
})
_TFDATA_ROOTS = ("tensorflow.data.", "tensorflow.contrib.data.", "tensorflow_datasets.load", "keras.utils.image_dataset_from_directory",
                 "keras.preprocessing.image_dataset_from_directory", "keras.utils.text_dataset_from_directory",
                 "keras.utils.timeseries_dataset_from_array")
_TFDS_BUILDERS = ("tensorflow_datasets.builder", "tensorflow_datasets.core.builder")
_UNWRAP = ("enumerate", "iter", "tqdm", "islice", "tqdm.tqdm", "itertools.islice", "tqdm.auto.tqdm")


def is_tfdata_root(qn: str | None) -> bool:
    """A call that creates a dataset (``tf.data.Dataset.from_tensor_slices``, ``tfds.load``...), not
    ``tf.data.Options()``."""
    if not qn or not qn.startswith(_TFDATA_ROOTS):
        return False
    return not qn.startswith(("tensorflow.data.", "tensorflow.contrib.data.")) or "Dataset" in qn or \
        ".experimental.make_" in qn or qn.endswith("_from_datasets")  # choose_from_datasets, sample_from_datasets


def unwrap_iter(mod: Module, expr: ast.expr) -> ast.expr:
    """``enumerate(ds)``, ``tqdm(ds)``, ``iter(ds)`` -> ``ds``."""
    while isinstance(expr, ast.Call) and expr.args:
        name = mod.qualname(expr.func) or (expr.func.id if isinstance(expr.func, ast.Name) else "")
        if name not in _UNWRAP and not (isinstance(expr.func, ast.Name) and expr.func.id in _UNWRAP):
            break
        expr = expr.args[0]
    return expr


def classify(mod: Module, expr: ast.AST | None, depth: int = 0) -> str | None:
    """``"distributed"``, ``"tfdata"`` (a pipeline not distributed) or None (cannot tell)."""
    d = mod.__dict__
    if expr is None or depth > 12:
        d["_tfdata_cycle"] = d.get("_tfdata_cycle", False) or depth > 12  # too deep: not an answer to keep
        return None
    cache, pending, key = d.setdefault("_tfdata_cache", {}), d.setdefault("_tfdata_pending", {}), id(expr)
    # An unknown reached through a cycle (``ds = ds.map(...)``) or the depth limit is kept for the current top-level
    # question only: asked from elsewhere it may resolve, so answers do not depend on the order rules ask in.
    if key in cache or key in pending:
        d["_tfdata_cycle"] = d.get("_tfdata_cycle", False) or key not in cache
        return cache.get(key)
    top, outer = not pending, d.get("_tfdata_cycle", False)
    pending[key], d["_tfdata_cycle"] = "?", False
    result = _classify(mod, expr, depth)
    cyclic = d["_tfdata_cycle"]
    del pending[key]
    (pending if result is None and cyclic else cache)[key] = result
    d["_tfdata_cycle"] = outer or cyclic
    if top:
        pending.clear()
    return result


def _classify(mod: Module, expr: ast.AST, depth: int) -> str | None:
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Attribute) and f.attr in DISTRIBUTE_ATTRS:
            return "distributed"
        if is_tfdata_root(mod.qualname(f)) or _tfds_builder_dataset(mod, f, depth):
            return "tfdata"
        if isinstance(f, ast.Attribute) and f.attr in _TFDATA_METHODS:
            inner = classify(mod, f.value, depth + 1)
            if inner is None and container_body(mod, expr, depth) is not None:
                return "tfdata"  # a pandas Series of datasets mapped to datasets: its items are pipelines
            return inner if inner is not None or not _autotuned(mod, expr) else "tfdata"
        if isinstance(f, ast.Call) and mod.local_class(f.func) is not None:  # ``ToKShotDataset(k_shot=4)(group)``
            return _merge({classify(mod, r, depth + 1) for r in _callable_returns(mod, f)})
        if isinstance(f, ast.Attribute) and f.attr == "pipe" and len(expr.args) == 1:
            # ``frame.pipe(ToDataset(k))``: pandas hands the frame to the callable and returns what it returns
            return _merge({classify(mod, r, depth + 1) for r in _callable_returns(mod, expr.args[0])})
        results = {classify(mod, r, depth + 1) for r in _returned(mod, expr)}
        return _merge(results)
    if isinstance(expr, ast.Subscript):  # ``tfds.load(...)["train"]``, ``datasets["train"]``
        return classify(mod, expr.value, depth + 1)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        values = [_unpacked_from(mod, expr, v) or v for v in mod.values_of(expr)[:8]]
        found = _merge({classify(mod, v, depth + 1) for v in values if v is not expr}) if values else None
        if found is None and isinstance(expr, ast.Name):
            if _declared_dataset(mod, expr) or _container_item(mod, expr, depth):
                return "tfdata"
            found = _merge({classify(mod, a, depth + 1) for a in passed_to(mod, expr)})  # a helper's parameter
        return found
    return None


def container_body(mod: Module, call: ast.Call, depth: int = 0) -> ast.expr | None:
    """For ``datasets.map(lambda ds: ds.batch(64).map(f))`` over a container (a pandas Series) whose items are
    tf.data pipelines (``frame.groupby("split").apply(lambda g: make_ds(g))``): the lambda's body, else None."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in ("map", "apply") and len(call.args) == 1
            and isinstance(call.args[0], ast.Lambda) and len(call.args[0].args.args) == 1) or depth > 10:
        return None
    return call.args[0].body if _items_are_datasets(mod, f.value, depth + 1) else None


def _items_are_datasets(mod: Module, expr: ast.expr, depth: int) -> bool:
    """``expr`` is a container built by mapping a lambda that returns a tf.data pipeline over a non-pipeline."""
    values = [expr] if isinstance(expr, ast.Call) else mod.values_of(expr)[:8]
    for v in values:
        if not (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("map", "apply")
                and len(v.args) == 1 and isinstance(v.args[0], ast.Lambda)):
            continue
        lam = v.args[0]  # not ``v.map(lambda e: e.data)`` (an item's own attribute): a pipeline the lambda makes
        if base_name(lam.body) not in [a.arg for a in lam.args.args] and classify(mod, v.func.value, depth + 1) \
                is None and classify(mod, lam.body, depth + 1) == "tfdata":
            return True
    return False


def _container_item(mod: Module, name: ast.Name, depth: int) -> bool:
    """``ds`` is the parameter of a lambda mapped over a container of tf.data pipelines (``container_body``)."""
    lam = next((a for a in mod.ancestors(name) if isinstance(a, ast.Lambda)), None)
    if lam is None or [a.arg for a in lam.args.args] != [name.id]:
        return False
    call = mod.parent.get(id(lam))
    return isinstance(call, ast.Call) and container_body(mod, call, depth + 1) is lam.body


def _tfds_builder_dataset(mod: Module, f: ast.expr, depth: int) -> bool:
    """``builder.as_dataset(split=...)`` where ``builder`` is made by ``tfds.builder(name)`` (or the chained
    ``tfds.builder(name).as_dataset(...)``): TensorFlow Datasets' builder returns a tf.data pipeline, as ``tfds.load``."""
    if not isinstance(f, ast.Attribute) or f.attr != "as_dataset" or depth > 10:
        return False
    values = [f.value] if isinstance(f.value, ast.Call) else mod.values_of(f.value)[:8]
    return any(isinstance(v, ast.Call) and (mod.qualname(v.func) or "").startswith(_TFDS_BUILDERS) for v in values)


def _declared_dataset(mod: Module, name: ast.Name) -> bool:
    """``name`` is a parameter its function declares a tf.data.Dataset: annotated ``tf.data.Dataset`` or
    described so in the docstring (``dataset: a tf.data.Dataset``)."""
    fn = mod.enclosing_function(name)
    if fn is None:
        return False
    args = fn.args
    arg = next((a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg == name.id), None)
    if arg is None:
        return False
    if arg.annotation is not None and (mod.qualname(arg.annotation) or "").startswith("tensorflow.data.Dataset"):
        return True
    doc = ast.get_docstring(fn) or ""
    return any(line.strip().startswith(name.id) and "tf.data.Dataset" in line for line in doc.splitlines())


def _autotuned(mod: Module, call: ast.Call) -> bool:
    """A Dataset method given ``tf.data.AUTOTUNE``: whatever it is called on is a tf.data pipeline."""
    return any(isinstance(n, ast.Attribute) and n.attr == "AUTOTUNE"
               and (mod.qualname(n) or "").startswith("tensorflow.data")
               for a in (*call.args, *(k.value for k in call.keywords)) for n in ast.walk(a))


def _merge(results: set) -> str | None:
    if "distributed" in results:
        return "distributed"
    if "tfdata" in results:
        return "tfdata"
    return None


def pipeline(mod: Module, expr: ast.AST | None, depth: int = 0, seen: set | None = None,
             steps: list | None = None) -> tuple[list, set]:
    """``(roots, methods)`` of the tf.data pipeline ``expr`` is: the calls that create it and every
    ``Dataset`` method applied on the way (through names, ``ds = ds.map(...)`` reassignments and local functions
    that return a pipeline). Empty when ``expr`` is not recognisably a pipeline. ``steps``, when given,
    receives every Dataset method call on the way (``.batch(64)``...)."""
    seen = set() if seen is None else seen
    if expr is None or depth > 12 or id(expr) in seen:
        return [], set()
    seen.add(id(expr))
    if isinstance(expr, ast.Call):
        f = expr.func
        if is_tfdata_root(mod.qualname(f)):
            return [expr], set()
        body = container_body(mod, expr, depth) if isinstance(f, ast.Attribute) else None
        if body is not None:  # a container of pipelines mapped item by item: each item's pipeline is the body
            return pipeline(mod, body, depth + 1, seen, steps)
        if isinstance(f, ast.Attribute) and f.attr in _TFDATA_METHODS:
            if steps is not None:
                steps.append(expr)
            roots, methods = pipeline(mod, f.value, depth + 1, seen, steps)
            if not roots and _autotuned(mod, expr):  # ``ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)``
                roots = [expr]  # made by a call we cannot read (a library loader): this is its first known step
            return roots, methods | {f.attr}
        roots, methods = [], set()
        for ret in _returned(mod, expr):
            r, m = pipeline(mod, ret, depth + 1, seen, steps)
            roots, methods = roots + r, methods | m
        return roots, methods
    if isinstance(expr, ast.Subscript):
        return pipeline(mod, expr.value, depth + 1, seen, steps)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        roots, methods = [], set()
        values = mod.values_of(expr)
        if not values and isinstance(expr, ast.Name) and _container_item(mod, expr, depth):
            return [expr], set()  # an item of a container of pipelines: where this pipeline starts here
        if isinstance(expr, ast.Name) and len(values) > 1:  # ``dataset`` bound in this function, not elsewhere
            values = _by_scope(mod, expr.id, values).get(id(mod.enclosing_function(expr))) or values
        for v in values[:16]:
            r, m = pipeline(mod, _unpacked_from(mod, expr, v) or v, depth + 1, seen, steps)
            roots, methods = roots + r, methods | m
        for a in passed_to(mod, expr) if not roots and isinstance(expr, ast.Name) else ():
            r, m = pipeline(mod, a, depth + 1, seen, steps)  # a helper's parameter: what its callers give it
            roots, methods = roots + r, methods | m
        return roots, methods
    return [], set()


def _by_scope(mod: Module, name: str, values: list) -> dict[int, list]:
    """The values bound to ``name``, grouped by the id of the function binding them (cached per name)."""
    cache = mod.__dict__.setdefault("_tfdata_by_scope", {})
    if name not in cache:
        groups: dict[int, list] = {}
        for v in values:
            groups.setdefault(id(mod.enclosing_function(v)), []).append(v)
        cache[name] = groups
    return cache[name]


_ITER_ATTRS = ("make_one_shot_iterator", "make_initializable_iterator", "__iter__", "create_iterator")
_NEXT_ATTRS = ("get_next", "next", "__next__")


def iterated_datasets(mod: Module) -> list[tuple[ast.Call, ast.expr]]:
    """``(consuming call, dataset)`` for each iterator drawn from: ``it = iter(ds)`` / ``tfe.Iterator(ds)`` /
    ``ds.make_one_shot_iterator()`` and then ``next(it)``, ``it.next()`` or ``it.get_next()``."""
    out = []
    for call, qn in mod.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr in _NEXT_ATTRS:
            recv = f.value
        elif qn in ("next", "builtins.next") or (isinstance(f, ast.Name) and f.id == "next"):
            recv = call.args[0] if call.args else None
        else:
            continue
        for it in ([recv] if isinstance(recv, ast.Call) else mod.values_of(recv)[:4]):
            ds = _iterator_source(mod, it)
            if ds is not None:
                out.append((call, ds))
    return out


def _iterator_source(mod: Module, it: ast.AST) -> ast.expr | None:
    if not isinstance(it, ast.Call):
        return None
    f = it.func
    name = mod.qualname(f) or (f.id if isinstance(f, ast.Name) else "")
    if isinstance(f, ast.Attribute) and f.attr in _ITER_ATTRS and not name.startswith("tensorflow."):
        return f.value  # ``ds.make_one_shot_iterator()``; ``tf.compat.v1.data.make_one_shot_iterator(ds)`` below
    if it.args and (name in ("iter", "builtins.iter") or name.endswith(("Iterator", "make_one_shot_iterator",
                                                                         "make_initializable_iterator"))):
        return it.args[0]
    return None



_LOADER_NAME = re.compile(r"^load$|dataset|loader|load_|_input|input_|pipeline|get_data|make_data|build_data")
_NOT_TRAINING = ("test", "val", "eval", "predict", "serving", "infer", "demo")
_SPLIT_PARAMS = {"split", "is_training", "training", "train", "subset", "mode"}


def loader_returns(mod: Module) -> list[ast.expr]:
    """The batched pipelines a data module's training loaders return (``def load_pascal_voc(split, batch_size):
    ... return dataset, info``; ``train_dataset = construct_dataset(...)`` where ``construct_dataset`` returns
    ``data.repeat().batch(n)``): for a file that trains nothing itself, these are what the project's training
    script consumes. A loader counts when its name says train, it takes a split (``split``, ``is_training``,
    ``mode``...) or the file binds its result to a train-named variable; loaders named for evaluation or demos,
    returned names such as ``test_dataset``, and pipelines returned unbatched (the caller batches them) are left out."""
    out = []
    trained = _train_bound_calls(mod)
    for name, defs in mod.functions.items():
        low = name.lower()
        if not _LOADER_NAME.search(low) or any(w in low for w in _NOT_TRAINING):
            continue
        for d in defs:
            params = {a.arg for a in (*d.args.posonlyargs, *d.args.args, *d.args.kwonlyargs)}
            if mod.enclosing_function(d) is not None or not (
                    "train" in low or params & _SPLIT_PARAMS or name in trained):
                continue
            for node in iter_body_nodes(d.body):
                if isinstance(node, ast.Return) and node.value is not None and mod.enclosing_function(node) is d:
                    vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                    out += [v for v in vals if not (isinstance(v, ast.Name) and any(w in v.id.lower() for w in
                            _NOT_TRAINING)) and classify(mod, v) == "tfdata" and _batched(mod, v)]
    return out


def _train_bound_calls(mod: Module) -> set[str]:
    """Names of the functions whose result the file binds to a train-named variable (``train_ds = make(...)``)."""
    return {dotted(v.func) for target, values in mod.assigns.items() if "train" in target.lower()
            for v in values if isinstance(v, ast.Call) and dotted(v.func)}


def _batched(mod: Module, expr: ast.expr) -> bool:
    if any("batch" in m for m in pipeline(mod, expr)[1]):
        return True
    return any(isinstance(n, ast.Call) and "batch" in (dotted(n.func) or "") for n in ast.walk(expr)) or \
        _applies_batch(mod, expr)


def _applies_batch(mod: Module, expr: ast.expr) -> bool:
    """``ds.apply(tf.data.experimental.dense_to_ragged_batch(n))`` somewhere in the pipeline."""
    steps: list = []
    pipeline(mod, expr, steps=steps)
    return any(s.func.attr == "apply" and s.args and isinstance(s.args[0], ast.Call)
               and "batch" in (dotted(s.args[0].func) or "") for s in steps)


_WORK = frozenset({"map", "interleave", "flat_map"})  # steps running the user's per-element code
_OPAQUE = frozenset({"apply", "zip", "concatenate"})  # may prefetch themselves, or join pipelines: unknown


def last_step(mod: Module, expr: ast.AST | None, depth: int = 0) -> ast.Call | None:
    """The last ``.prefetch`` or per-element-work step (``.map``, ``.interleave``, ``.flat_map``) of the pipeline
    ``expr`` is (batching, shuffling, repeating steps are looked through: authors prefetch before them), following
    the binding of a name that reaches the use (``ds = ds.map(...)`` lines above it) and the returns of project
    loaders; None when unknown."""
    if expr is None or depth > 10:
        return None
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Attribute) and f.attr in _TFDATA_METHODS:
            if f.attr in _WORK or f.attr == "prefetch":
                return expr
            return None if f.attr in _OPAQUE else last_step(mod, f.value, depth + 1)
        found = {last_step(mod, r, depth + 1) for r in _returned(mod, expr)}
        return found.pop() if len(found) == 1 else None
    if isinstance(expr, ast.Name):
        value = _binding_before(mod, expr)
        return last_step(mod, _unpacked_from(mod, expr, value) or value, depth + 1) if value is not None else None
    return None


def _binding_before(mod: Module, name: ast.Name) -> ast.expr | None:
    """The value of the assignment to ``name`` in the same function that ends last above the line using it."""
    fn, best, line = mod.enclosing_function(name), None, -1
    for v in mod.values_of(name):
        st = mod.parent.get(id(v))
        end = getattr(st, "end_lineno", None) or getattr(st, "lineno", 0)
        if isinstance(st, ast.Assign) and mod.enclosing_function(v) is fn and line < end < name.lineno:
            best, line = v, end
    return best
