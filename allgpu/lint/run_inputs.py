"""Where the batches ``strategy.run`` draws with ``next(iterator)`` come from (TF004).

``strategy.run(step_fn, args=(next(iterator),))`` inside a ``tf.function`` whose ``iterator`` parameter the
caller fills from ``iter(dataset)``, possibly through dicts of iterators and of loaders
(``iterators[name] = iter(ds)`` ... ``for name, it in iterators.items(): train_step(it)``): the dataset
expressions found at the end of that flow, for the rule to test whether they were distributed.
"""

from __future__ import annotations

import ast
import re

from allgpu.lint import tfdata
from allgpu.lint.astutil import argument_for
from allgpu.lint.facts import RUN_ATTRS
from allgpu.lint.resolve import Module, dotted, kwarg

_DEPTH = 6
_STEPS = frozenset({"map", "prefetch", "shuffle", "repeat", "cache", "filter", "take", "with_options", "apply"})
_LOADER = re.compile(r"^load$|^load_|dataset|loader|_input|input_|get_data|make_data|build_data")


def run_next_sources(mod: Module, facts) -> list[tuple[ast.Call, ast.expr]]:
    """``(next call, dataset expression)`` for each ``next(it)`` in the arguments of this file's
    ``strategy.run`` calls whose iterator can be traced to ``iter(dataset)``."""
    out = []
    for call, _ in mod.calls:
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr in RUN_ATTRS) or mod.is_foreign(call):
            continue
        args = kwarg(call, "args") or (call.args[1] if len(call.args) > 1 else None)
        if args is None or not facts.is_strategy_expr(f.value):
            continue
        for n in ast.walk(args):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next" and n.args:
                out += [(n, ds) for ds in _iterator_datasets(mod, n.args[0], 0)]
    return out


def check_tf004_iterators(ctx) -> None:
    """``strategy.run(fn, args=(next(iterator),))`` whose iterator is ``iter()`` of a pipeline not distributed,
    through the step function's callers and dicts of iterators/loaders (``run_inputs``)."""
    seen = set()
    for nxt, ds in run_next_sources(ctx.mod, ctx.facts):
        values = dataset_values(ctx.mod, ds)
        kinds = [tfdata.classify(ctx.mod, v) for v in values]
        if "distributed" in kinds or tfdata.classify(ctx.mod, ds) == "distributed":
            continue  # ``ds = strategy.experimental_distribute_dataset(ds)`` on one of the ways
        for v, kind in zip(values, kinds):
            if id(v) in seen or ctx.mod.is_foreign(v):
                continue
            seen.add(id(v))
            if kind == "tfdata" or (kind is None and undistributed_loader(ctx.mod, v)):
                what = dotted(v) or dotted(getattr(v, "func", None)) or "the dataset"
                ctx.emit("TF004", v, f"strategy.run draws its batches (next(), line {nxt.lineno}) from `{what}`, a "
                                     "pipeline that was not passed through strategy.experimental_distribute_dataset()")


def undistributed_loader(mod: Module, expr: ast.expr) -> bool:
    """A project or library loader called for batches and not handed the strategy
    (``builder.load(batch_size=64)``, also followed by dataset steps: ``.load(batch_size=64).map(fn)``): it
    returns a plain per-host pipeline, as such loaders do."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _STEPS:
        expr = expr.func.value
    if not isinstance(expr, ast.Call) or kwarg(expr, "batch_size") is None:
        return False
    f = expr.func
    name = (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")).lower()
    if not _LOADER.search(name) or "distribut" in name:
        return False
    return not any("strateg" in (dotted(a) or "").lower() or "distribut" in (dotted(a) or "").lower()
                   for a in (*expr.args, *(k.value for k in expr.keywords)))


def _iterator_datasets(mod: Module, expr: ast.expr, depth: int) -> list[ast.expr]:
    """The datasets an iterator expression was drawn from (``iter(ds)``, ``ds.__iter__()``)."""
    if depth > _DEPTH:
        return []
    if isinstance(expr, ast.Call):
        src = tfdata._iterator_source(mod, expr)
        return [src] if src is not None else []
    return [d for v in _sources(mod, expr, depth) for d in _iterator_datasets(mod, v, depth + 1)]


def dataset_values(mod: Module, expr: ast.expr, depth: int = 0) -> list[ast.expr]:
    """What a dataset name stands for: its assignments, or the dict values a loop over ``d.items()`` gives it."""
    if depth > _DEPTH or not isinstance(expr, ast.Name):
        return [expr]
    return [d for v in _sources(mod, expr, depth) for d in dataset_values(mod, v, depth + 1)] or [expr]


def _sources(mod: Module, name: ast.expr, depth: int) -> list[ast.expr]:
    """Values that flow into ``name``: a parameter gets its callers' arguments, a loop target over
    ``d.items()``/``d.values()`` gets ``d``'s values, any other name its assignments."""
    if not isinstance(name, ast.Name):
        return []
    fn = mod.enclosing_function(name)
    if fn is not None and name.id in _params(fn):
        return [a for c in mod.callers(fn)[:8] if (a := _argument(fn, c, name.id)) is not None]
    loop = next((a for a in mod.ancestors(name) if isinstance(a, (ast.For, ast.AsyncFor))
                 and any(isinstance(t, ast.Name) and t.id == name.id for t in ast.walk(a.target))), None)
    if loop is not None:
        return _loop_values(mod, loop, name.id)
    return mod.values_of(name)[:4]


def _params(fn) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _argument(fn, call: ast.Call, param: str) -> ast.expr | None:
    first = fn.args.posonlyargs[:1] + fn.args.args[:1]
    bound = bool(first) and first[0].arg in ("self", "cls") and isinstance(call.func, ast.Attribute)
    return argument_for(call, fn, param, bound=bound)


def _loop_values(mod: Module, loop, name: str) -> list[ast.expr]:
    """``for k, v in d.items()`` / ``for v in d.values()``: the values stored in ``d`` (``d[k] = ...`` or a
    dict literal)."""
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "values")):
        return []
    t = loop.target
    if it.func.attr == "items" and not (isinstance(t, ast.Tuple) and len(t.elts) == 2
                                        and isinstance(t.elts[1], ast.Name) and t.elts[1].id == name):
        return []
    key = dotted(it.func.value)
    if key is None:
        return []
    out = [v for s, v in mod.subscript_assigns if dotted(s.value) == key]
    for d in mod.values_of(it.func.value)[:4]:
        if isinstance(d, ast.Dict):
            out += [v for v in d.values if v is not None]
        elif isinstance(d, ast.DictComp):  # ``d = {k: strategy.experimental_distribute_dataset(v) for ...}``
            out.append(d.value)
    return out[:8]


_TRAINING_FEATURES = frozenset({"tape", "apply", "backward", "optstep"})
_DISTRIBUTE = ("experimental_distribute_dataset", "distribute_dataset")


def run_fed_pipelines(mod: Module, facts) -> list[ast.expr]:
    """The pipelines handed to ``strategy.experimental_distribute_dataset(ds)`` whose distributed iterator a
    *training* ``strategy.run`` step draws from with ``next()`` (its step function takes gradients or applies
    them; ``test_step``/``eval_step`` are not): what the custom loop trains on, as ``fit``'s input is."""
    out = []
    for nxt, ds in run_next_sources(mod, facts):
        if not _training_run(mod, facts, nxt):
            continue
        for v in dataset_values(mod, ds):
            f = getattr(v, "func", None)
            if isinstance(v, ast.Call) and isinstance(f, ast.Attribute) and f.attr in _DISTRIBUTE and v.args:
                out.append(v.args[0])
    return out


def _training_run(mod: Module, facts, nxt: ast.Call) -> bool:
    run = next((a for a in mod.ancestors(nxt) if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute)
                and a.func.attr in RUN_ATTRS), None)
    outer = mod.enclosing_function(nxt)
    if run is None or not run.args or (outer is not None and re.search(r"test|val|eval|predict|infer", outer.name)):
        return False
    return any(facts.features(fn.body, fn) & _TRAINING_FEATURES for fn in mod.local_functions(run.args[0]))
