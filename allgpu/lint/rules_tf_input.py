"""TensorFlow rules about input and cluster: TF007 (batch not scaled), TF008/TF009 (tf.data), TF012 (TF_CONFIG)."""

from __future__ import annotations

import ast
import re

from allgpu.lint import tfdata
from allgpu.lint.batch_values import applied_batch, const_int, loader_batch, named_global, per_replica_context
from allgpu.lint.astutil import in_test_case, star_kwarg
from allgpu.lint.binding import after_strategy_ends, name_loads
from allgpu.lint.config_batch import check_config_batch
from allgpu.lint.resolve import dotted, has_star_kwargs, iter_body_nodes, kwarg
from allgpu.lint.run_inputs import run_fed_pipelines
from allgpu.lint.trainer_batch import check_trainer_batch

_DATASET_WORDS = ("dataset", "ds", "data_gen", "generator", "loader", "iterator", "flow")


def _dataset_like(mod, call: ast.Call) -> bool:
    """``fit(x, batch_size=...)`` where x is a dataset or generator: Keras ignores ``batch_size`` then."""
    x = call.args[0] if call.args else kwarg(call, "x")
    if x is None:
        return False
    if tfdata.classify(mod, x) is not None:
        return True
    name = (dotted(x) or "").rsplit(".", 1)[-1].lower()
    return any(w == name or name.endswith("_" + w) or name.startswith(w + "_") or w in name.split("_")
               for w in _DATASET_WORDS)


def _before_any_strategy(ctx, call: ast.Call) -> bool:
    """A module-level statement that runs before the first strategy is constructed (default strategy)."""
    first = ctx.facts.first_strategy_line("tf")
    return first is not None and call.lineno < first and ctx.mod.enclosing_function(call) is None


def _rescaled_names(mod) -> set:
    """Names changed in place (``BATCH *= strategy.num_replicas_in_sync``): not constants."""
    return mod.augassigned


def check_tf007(ctx) -> None:
    """A literal (or a name only ever bound to one literal) as the batch under a multi-device strategy.

    A batch computed from ``num_replicas_in_sync`` is not a constant, so mentioning it elsewhere in the file
    (printing the replica count) does not silence a ``.batch(64)`` that ignores it.
    """
    mod, facts = ctx.mod, ctx.facts
    check_trainer_batch(ctx)  # the strategy may be made by a project trainer the pipeline is handed to
    if not facts.has_strategy("tf"):
        return
    trained = _trained_steps(ctx)
    for call, _ in mod.calls:
        f = call.func
        if not isinstance(f, ast.Attribute):
            continue
        applied = applied_batch(mod, call) if f.attr == "apply" else None
        if (f.attr in ("batch", "padded_batch") and (call.args or kwarg(call, "batch_size")) or applied is not None) \
                and tfdata.classify(mod, f.value) == "tfdata":
            arg = applied if applied is not None else call.args[0] if call.args else kwarg(call, "batch_size")
            if per_replica_context(mod, call) or _evaluation_only(mod, call):
                continue
            if trained and id(call) not in trained:
                continue  # training's pipelines are known and this is not one (a vocabulary, a metric's candidates)
        elif f.attr == "fit":
            arg = kwarg(call, "batch_size")
            if _before_any_strategy(ctx, call) or _dataset_like(mod, call):
                continue
            st = next((a for a in mod.ancestors(call) if isinstance(a, ast.stmt)), call)
            if after_strategy_ends(mod, facts, st):
                continue
        else:
            continue
        if arg is None and f.attr == "fit":
            arg = star_kwarg(mod, call, "batch_size")[0]
        for size, node, note in _fixed_batches(mod, call, arg):
            if not named_global(arg, mod) and dotted(arg) not in _rescaled_names(mod) and not in_test_case(mod, node):
                ctx.emit("TF007", node, f"batch size {size}{note} is fixed: with N replicas each GPU gets "
                                        f"{size}/N; scale it by strategy.num_replicas_in_sync")
    _check_loaders(ctx)
    check_config_batch(ctx, _training_inputs(ctx), [c for c, _ in mod.calls if id(c) in trained and isinstance(
        c.func, ast.Attribute) and c.func.attr in ("batch", "padded_batch")])
    _check_tf007_in_other_modules(ctx)


def _check_loaders(ctx) -> None:
    """``train_ds = imagenet.load(split="train", batch_size=FLAGS.batch_size)`` given to fit, or distributed and
    drawn by a training ``strategy.run`` step: a library loader batching training's pipeline by a constant."""
    mod, seen = ctx.mod, set()
    for expr in [*_training_inputs(ctx), *run_fed_pipelines(mod, ctx.facts)]:
        call = loader_batch(mod, expr)
        if call is None or id(call) in seen or _bound_for_evaluation(mod, call) or in_test_case(mod, call):
            continue
        seen.add(id(call))
        arg = kwarg(call, "batch_size")
        size = const_int(mod, arg)
        if size is not None and size > 0 and not named_global(arg, mod) and dotted(arg) not in _rescaled_names(mod):
            ctx.emit("TF007", call, f"batch size {size} (given to {dotted(call.func) or 'a loader'}()) is fixed: with "
                                    f"N replicas each GPU gets {size}/N; scale it by strategy.num_replicas_in_sync")


def _trained_steps(ctx) -> set[int]:
    """ids of the Dataset method calls in the pipelines training consumes (fit's input, a training loop's,
    an iterator's, an input_fn's, what is given to experimental_distribute_dataset); empty when none is known."""
    cached = ctx.mod.__dict__.get("_trained_steps")
    if cached is not None:
        return cached
    mod, steps = ctx.mod, []
    inputs = list(_training_inputs(ctx))
    for call, _ in mod.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "experimental_distribute_dataset" and call.args:
            inputs.append(call.args[0])
    for expr in inputs:
        tfdata.pipeline(mod, expr, steps=steps)
    out = mod.__dict__["_trained_steps"] = {id(c) for c in steps}
    return out


def _check_tf007_in_other_modules(ctx) -> None:
    """``train_ds = data.make_dataset(64)`` where the project's ``data.py`` batches by that parameter: reported
    at this file's call (a helper's own lines belong to the helper's file)."""
    mod = ctx.mod
    if mod.importer is None:
        return
    for call, qn in list(mod.calls):
        if qn is None or "." not in qn:
            continue
        for fn in mod.local_functions(call.func):
            if not mod.is_foreign(fn):
                continue
            for node in iter_body_nodes(fn.body):
                f = getattr(node, "func", None)
                if not (isinstance(node, ast.Call) and isinstance(f, ast.Attribute) and f.attr in ("batch", "padded_batch")
                        and node.args and isinstance(node.args[0], ast.Name)):
                    continue
                if tfdata.classify(mod, f.value) != "tfdata" or per_replica_context(mod, node):
                    continue
                size, given = _const_argument(mod, fn, call, node.args[0].id)
                if size is not None and not named_global(given, mod):
                    ctx.emit("TF007", call, f"batch size {size} (given to {dotted(call.func)}() "
                                            f"[{_module_name(mod, fn)}], which batches by it) is fixed: with N "
                                            f"replicas each GPU gets {size}/N; scale it by "
                                            "strategy.num_replicas_in_sync")


def _module_name(mod, node) -> str:
    owner = mod.owner(node)
    return getattr(getattr(owner, "path", None), "name", "another module")


_EVAL_ATTRS = ("evaluate", "predict", "predict_on_batch", "test_on_batch", "evaluate_generator", "predict_generator")


def _evaluation_only(mod, call: ast.Call) -> bool:
    """The pipeline ``call`` batches is bound to a name that is only ever evaluated on (``evaluate``,
    ``predict``, ``validation_data=``): its batch size does not shape training."""
    st = next((a for a in mod.ancestors(call) if isinstance(a, ast.stmt)), None)
    if not isinstance(st, ast.Assign) or len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
        return False
    name = st.targets[0].id
    loads = name_loads(mod).get(name, [])
    if not loads:
        return False
    for n in loads:
        parent = mod.parent.get(id(n))
        if isinstance(parent, ast.keyword) and parent.arg in ("validation_data", "eval_data"):
            continue
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr in _EVAL_ATTRS:
            continue
        if isinstance(parent, ast.Attribute) and mod.parent.get(id(parent)) is not None and parent.attr in (
                "prefetch", "cache", "repeat"):  # ``test_ds = test_ds.prefetch(...)``: the same pipeline, followed on
            outer = next((a for a in mod.ancestors(parent) if isinstance(a, ast.stmt)), None)
            if isinstance(outer, ast.Assign) and any(dotted(t) == name for t in outer.targets):
                continue
        return False
    return True


def _fixed_batches(mod, call: ast.Call, arg: ast.expr | None):
    """``(size, node to report, note)`` for each constant batch ``arg`` can be: a literal or constant name (at
    its own call), or a parameter of the enclosing helper that its callers give a constant (at each such
    call: ``load_data(32)``), its default counting when a caller leaves it out."""
    size = const_int(mod, arg)
    if size is not None:
        yield size, call, ""
        return
    if not isinstance(arg, ast.Name) or mod.values_of(arg):
        return
    fn = mod.enclosing_function(arg)
    if fn is None:
        return
    for caller in mod.callers(fn) if not mod.is_foreign(fn) else foreign_callers(mod, fn):
        if _bound_for_evaluation(mod, caller):
            continue  # ``val_dataset = extract(val_dir, batch_size=1)``: this call's pipeline is not trained on
        value, given = _const_argument(mod, fn, caller, arg.id)
        if value is not None and not named_global(given, mod):
            name = caller.func.attr if isinstance(caller.func, ast.Attribute) else dotted(caller.func)
            yield value, caller, f" (given to {name}(), which batches by it at line {arg.lineno})"


_EVAL_TOKENS = {"val", "valid", "validation", "test", "eval", "evaluation", "dev", "predict", "infer", "inference"}


def _bound_for_evaluation(mod, call: ast.Call) -> bool:
    """``call``'s result is bound only to evaluation-named targets (``val_ds``, ``test_dataset``) or to a name
    only evaluated on."""
    st = next((a for a in mod.ancestors(call) if isinstance(a, ast.stmt)), None)
    if not isinstance(st, ast.Assign) or st.value is not call:
        return False
    names = [dotted(e) for t in st.targets for e in (t.elts[:1] if isinstance(t, ast.Tuple) else [t])]
    if names and all(n and _EVAL_TOKENS & set(n.rsplit(".", 1)[-1].lower().split("_")) for n in names):
        return True
    return _evaluation_only(mod, call)


def foreign_callers(mod, fn) -> list[ast.Call]:
    """This file's calls of ``fn``, a function of another module of the project."""
    return [c for c, qn in mod.calls if qn and "." in qn and fn in mod.local_functions(c.func)]


def _const_argument(mod, fn, caller: ast.Call, param: str) -> tuple[int | None, ast.expr | None]:
    """The int constant ``caller`` gives ``fn``'s parameter ``param`` (or its default), and the expression."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if param not in params:
        return None, None
    index = params.index(param)
    defaults = dict(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
    shift = 1 if params and params[0] in ("self", "cls") and isinstance(caller.func, ast.Attribute) else 0
    given = kwarg(caller, param)
    if given is None and 0 <= index - shift < len(caller.args):
        given = caller.args[index - shift]
    if given is None and (any(k.arg is None for k in caller.keywords)
                          or any(isinstance(a, ast.Starred) for a in caller.args)):
        return None, None
    return const_int(mod, given if given is not None else defaults.get(param)), given


_TRAIN_LOOP_FEATURES = frozenset({"tape", "apply", "run", "backward", "optstep", "fit"})


_TRAIN_CALL = re.compile(r"(^|_)(train|fit)($|_)")
_TRAIN_NAME = re.compile(r"train")


def _training_inputs(ctx) -> list[ast.expr]:
    """The datasets training consumes: ``fit``'s first argument and what a training loop iterates (cached)."""
    cached = ctx.mod.__dict__.get("_training_inputs")
    if cached is None:
        cached = ctx.mod.__dict__["_training_inputs"] = _find_training_inputs(ctx)
    return cached


def _find_training_inputs(ctx) -> list[ast.expr]:
    mod, facts = ctx.mod, ctx.facts
    out = []
    for call, _ in mod.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr in ("fit", "fit_generator"):
            x = call.args[0] if call.args else kwarg(call, "x")
            if x is not None:
                out.append(x)
        elif _TRAIN_CALL.search((f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")).lower()):
            # ``train(model, train_dataset=train_dataset)``: a project's or library's training function
            out += [a for a in (*call.args, *(k.value for k in call.keywords))
                    if isinstance(a, ast.Name) and _TRAIN_NAME.search(a.id.lower()) and not _evaluation_name(a.id)]
    for loop in mod.loops:
        if isinstance(loop, ast.While):
            continue
        it = tfdata.unwrap_iter(mod, loop.iter)
        if tfdata.classify(mod, it) != "tfdata":  # cheap test first: most loops are not over a pipeline
            continue
        if facts.features(loop.body, loop) & _TRAIN_LOOP_FEATURES or _calls_attr(loop.body, "train_on_batch"):
            out.append(it)
    graph = "Session" in mod.attrs or "Session" in mod.name_ids  # TF1: get_next() builds tensors sess.run trains
    for call, ds in tfdata.iterated_datasets(mod):  # next(it) / it.get_next() where training draws from it
        if _evaluation_name(dotted(ds) or ""):
            continue
        loop = next((a for a in mod.ancestors(call) if isinstance(a, (ast.For, ast.While, ast.AsyncFor))), None)
        if (loop is not None and facts.features(loop.body, loop) & _TRAIN_LOOP_FEATURES) or _in_input_fn(mod, call) \
                or (graph and loop is None and facts.file_features & {"apply"}):
            out.append(ds)
    for name, defs in mod.functions.items():  # an Estimator input_fn returns the pipeline the estimator trains on
        if "input_fn" in name and not _evaluation_name(name):
            rets = [n.value for d in defs for n in iter_body_nodes(d.body)
                    if isinstance(n, ast.Return) and n.value is not None and not isinstance(n.value, ast.Tuple)]
            # ``return features_and_labels(dataset)``: the helper draws the iterator from the pipeline it is given
            out += rets + [a for r in rets if isinstance(r, ast.Call) and mod.local_functions(r.func)
                           for a in r.args if isinstance(a, ast.Name)]
    return out


def _evaluation_name(name: str) -> bool:
    """``test_ds``, ``val_iter``, ``eval_input_fn``, ``serving_input_fn``: not what training consumes."""
    low = name.lower()
    return any(w in low for w in ("test", "val", "eval", "predict", "serving", "infer"))


def _in_input_fn(mod, node: ast.AST) -> bool:
    fn = mod.enclosing_function(node)
    return fn is not None and "input_fn" in fn.name and not _evaluation_name(fn.name)


def _calls_attr(stmts, attr: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
               for n in iter_body_nodes(stmts))


def check_tf008(ctx) -> None:
    """A tf.data pipeline that training consumes with no ``prefetch`` anywhere in it.

    Pipelines passed through ``strategy.experimental_distribute_dataset`` / ``distribute_datasets_from_function``
    are left alone: the distributed iterator prefetches onto the devices itself.
    """
    mod = ctx.mod
    done: set[int] = set()
    # a data module that trains nothing itself: the batched pipelines its loaders return feed training elsewhere
    inputs = _training_inputs(ctx) or ([] if ctx.facts.file_features & {"fit", "apply"} else tfdata.loader_returns(mod))
    for expr in inputs:
        if tfdata.classify(mod, expr) != "tfdata":
            continue
        roots, methods = tfdata.pipeline(mod, expr)
        late = None
        if roots and "prefetch" in methods:  # prefetched, but is the prefetch the last step?
            late = tfdata.last_step(mod, expr)
            if late is None or late.func.attr == "prefetch" or mod.is_foreign(late):
                continue
        if not roots or id(late or expr) in done or in_test_case(mod, expr):
            continue
        if late is not None:
            done.add(id(late))
            ctx.emit("TF008", late, f"this tf.data pipeline feeds training and is prefetched before this "
                                    f".{late.func.attr}(): the steps after the prefetch are not overlapped with "
                                    "training; move .prefetch(tf.data.AUTOTUNE) to the end")
            continue
        root = min(roots, key=lambda r: (r.lineno, r.col_offset))
        if id(root) in done:
            continue
        done.add(id(root))
        ctx.emit("TF008", root, "this tf.data pipeline feeds training but is never prefetched: add "
                                ".prefetch(tf.data.AUTOTUNE) as its last step")


def check_tf009(ctx) -> None:
    mod = ctx.mod
    trained = _trained_steps(ctx) if mod.attrs.get("map") else set()
    for node in mod.attrs.get("map", []):
        call = mod.parent.get(id(node))
        if not isinstance(call, ast.Call) or call.func is not node:
            continue
        if len(call.args) >= 2 or kwarg(call, "num_parallel_calls") is not None or has_star_kwargs(call):
            continue
        if trained and id(call) not in trained:
            continue  # training's pipelines are known and this map is in none (evaluation, a vocabulary, a peek)
        if tfdata.classify(mod, node.value) == "tfdata":
            ctx.emit("TF009", call, "Dataset.map() without num_parallel_calls processes one element at a time: "
                                    "add num_parallel_calls=tf.data.AUTOTUNE")


def check_tf012(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    src = mod.source
    if "TF_CONFIG" in src or "ClusterResolver" in src or "cluster_resolver" in src:
        return
    for call, fw, kind in facts.strategy_calls:
        if fw == "tf" and kind == "MultiWorkerMirroredStrategy" and not call.args and not has_star_kwargs(call):
            ctx.emit("TF012", call, "MultiWorkerMirroredStrategy with no TF_CONFIG or cluster resolver in sight: "
                                    "each worker will train alone")
