"""TensorFlow/Keras rules about scope and the custom loop: TF001, TF004-TF006 and TF010-TF011."""

from __future__ import annotations

import ast

from allgpu.lint import run_inputs, tf_ema, tfdata
from allgpu.lint.facts import reachable_functions
from allgpu.lint.binding import after_strategy_ends, returned_binding, used_after
from allgpu.lint.flow import (call_site_note, nested_check, stack_targets, target_stmt, undistributed_branch,
                              walk_scopes)
from allgpu.lint.resolve import const_str, dotted, iter_body_nodes, kwarg
from allgpu.lint.tf_handoff import baseline_before_strategy, strategy_on_path, trained_by_callee

_KERAS_MODELS = {"keras.Sequential", "keras.Model", "keras.models.Sequential", "keras.models.Model",
                 "keras.models.load_model", "keras.models.clone_model", "keras.saving.load_model"}
_TF_MODEL_BASES = {"keras.Model", "keras.Sequential", "keras.models.Model", "keras.layers.Layer", "tensorflow.Module"}


# Keras model libraries: ``keras_cv.models.RetinaNet(...)``, ``keras_hub.models.BertClassifier.from_preset(...)``
_LIBRARY_MODELS = ("keras_cv.models.", "keras_cv.applications.", "keras_hub.models.", "keras_nlp.models.")


def _cap(qn: str) -> bool:
    return qn.rsplit(".", 1)[-1][:1].isupper()


def tf_creation(ctx, call: ast.Call) -> str | None:
    """What a call creates: ``"model"``, ``"optimizer"``, ``"metric"``, ``"variable"``, ``"layer"`` or None."""
    mod = ctx.mod
    qn = mod.qualname(call.func)
    if qn:
        if qn in _KERAS_MODELS or (qn.startswith("keras.applications.") and _cap(qn)):
            return "model"
        if qn.startswith("transformers.TF") and qn.endswith("from_pretrained"):
            return "model"
        if qn.startswith(_LIBRARY_MODELS) and (_cap(qn) or qn.endswith(".from_preset")):
            return "model"
        if qn.startswith(("keras.optimizers.", "tensorflow.optimizers.")) and "schedules" not in qn and _cap(qn):
            return "optimizer"  # ``tf.optimizers`` is TensorFlow 2's alias of ``tf.keras.optimizers``
        if qn.startswith(("keras.metrics.", "tensorflow.metrics.")) and _cap(qn):
            return "metric"
        if qn.startswith("keras.layers.") and _cap(qn):
            return "layer"
        if qn == "tensorflow.Variable":
            return "variable"
        return None
    cls = mod.local_class(call.func)
    if cls is not None and mod.class_bases(cls) & _TF_MODEL_BASES:
        return "model"
    return None


def training_uses(ctx) -> dict[str, list[ast.AST]]:
    """name -> the nodes that train what it holds: ``fit``, ``train_on_batch``, ``apply_gradients``,
    ``minimize``, ``trainable_variables``, ``compile(optimizer=name)``, a metric's ``update_state`` in a
    ``strategy.run`` script."""
    cached = ctx.mod.__dict__.get("_tf_training_uses")
    if cached is not None:
        return cached
    mod, out = ctx.mod, {}
    has_run = "run" in ctx.facts.file_features
    for call, _ in mod.calls:
        f = call.func
        if not isinstance(f, ast.Attribute):
            continue
        recv = dotted(f.value)
        if recv and f.attr in ("fit", "fit_generator", "train_on_batch", "apply_gradients", "minimize"):
            out.setdefault(recv, []).append(call)
        elif recv and f.attr == "update_state" and has_run and _in_replica_step(ctx, call):
            out.setdefault(recv, []).append(call)
        elif f.attr == "compile":
            if dotted(kwarg(call, "optimizer")):
                out.setdefault(dotted(kwarg(call, "optimizer")), []).append(call)
            for name in _compiled_metric_names(call):  # ``auc = AUC()`` then ``compile(metrics=[auc])``
                out.setdefault(name, []).append(call)
    for attr in ("trainable_variables", "trainable_weights"):
        for node in mod.attrs.get(attr, []):
            name = dotted(node.value)
            if name and not _only_read(mod, node):
                out.setdefault(name, []).append(node)
    ctx.mod.__dict__["_tf_training_uses"] = out
    return out


def _compiled_metric_names(call: ast.Call) -> list[str]:
    """The names listed in a compile's ``metrics=[...]`` / ``weighted_metrics=[...]`` (a dict's values too):
    Keras refuses a metric made in another strategy scope than the model's."""
    out = []
    for k in call.keywords:
        if k.arg in ("metrics", "weighted_metrics"):
            items = k.value.values if isinstance(k.value, ast.Dict) else getattr(k.value, "elts", [])
            for e in items:
                for x in (e.elts if isinstance(e, (ast.List, ast.Tuple)) else [e]):
                    if isinstance(x, ast.Name):
                        out.append(x.id)
    return out


def _compiled_into(mod, call: ast.Call) -> str | None:
    """``"model.compile"`` when ``call`` is written straight into ``model.compile(...)`` (the optimizer argument or
    any ``*optimizer*`` keyword of a subclass's compile, or a metric in its ``metrics=[...]``), else None."""
    node = call
    for anc in mod.ancestors(call):
        if isinstance(anc, (ast.List, ast.Tuple, ast.keyword)):
            node = anc
            continue
        if isinstance(anc, ast.Call) and isinstance(anc.func, ast.Attribute) and anc.func.attr == "compile":
            recv = dotted(anc.func.value)
            direct = (anc.args[:1] == [node]) or any(k is node and k.arg and ("optimizer" in k.arg or k.arg in (
                "metrics", "weighted_metrics")) for k in anc.keywords)  # a GAN's ``compile(d_optimizer=...)``
            return f"{recv}.compile" if recv and direct else None
        return None
    return None


def _in_replica_step(ctx, call: ast.Call) -> bool:
    """``call`` runs per replica: in a function given to strategy.run (or one it calls), or in a Keras
    train_step/test_step. A metric updated in a plain loop on the coordinator is evaluation outside the strategy."""
    fn = ctx.mod.enclosing_function(call)
    while fn is not None:
        if id(fn) in ctx.facts.run_targets or _keras_compiled_step(ctx.mod, fn):
            return True
        fn = ctx.mod.enclosing_function(fn)
    return False


_READERS = {"len", "print", "str", "repr", "list", "sum", "format", "enumerate", "zip", "sorted"}


def _only_read(mod, node: ast.AST) -> bool:
    """``model.trainable_variables`` looked at, not trained: iterated by a ``for`` (``var.assign(...)`` to
    interpolate two loaded models), or given only to ``len``/``print``... outside any gradient call."""
    child = node
    for anc in mod.ancestors(node):
        if isinstance(anc, ast.Call):
            fname = anc.func.attr if isinstance(anc.func, ast.Attribute) else getattr(anc.func, "id", "")
            if fname not in _READERS:
                return False
        elif isinstance(anc, (ast.For, ast.AsyncFor)):
            return child is anc.iter
        elif isinstance(anc, ast.stmt):
            return not isinstance(anc, (ast.Assign, ast.AnnAssign, ast.Return))
        child = anc
    return False


def check_tf001(ctx) -> None:
    facts = ctx.facts
    if not (facts.has_strategy("tf") or facts.strategy_handed()):
        return
    uses = training_uses(ctx)
    classify = lambda c: tf_creation(ctx, c)  # noqa: E731
    nested = nested_check(facts, classify)

    def on_call(call: ast.Call, in_scope: bool, stack: list) -> None:
        if in_scope:
            return
        kind = classify(call)
        if kind is None or nested(call):
            return
        st = target_stmt(stack)
        names = {n for n in stack_targets(stack) if used_after(ctx.mod, st, n, uses, returns=False)}
        outer, returned = returned_binding(ctx.mod, stack, lambda s: (target_stmt(s), stack_targets(s)))
        if outer is not None or returned:
            st, names = outer, names | {n for n in returned if used_after(ctx.mod, outer, n, uses)}
        handed, mention = set(), lambda n: _mentions_strategy(ctx, n)  # noqa: E731
        if outer is None and not returned and not names:
            names = {n for n in stack_targets(stack) if used_after(ctx.mod, st, n, uses)}
            handed = set() if names else trained_by_callee(ctx.mod, st, stack_targets(stack), uses, mention)
            names = names or handed
        if names and st is not None and after_strategy_ends(ctx.mod, facts, st):
            return  # a later snippet that no longer uses the strategy
        label = None
        if not names and st is not None:  # ``model.compile(tf.keras.optimizers.SGD(), ...)`` outside the scope
            label = _compiled_into(ctx.mod, call)
            names = {label} if label and used_after(ctx.mod, st, label.rsplit(".", 1)[0], uses) else set()
        if names and (undistributed_branch(facts, [call, *stack]) or not (handed or strategy_on_path(
                ctx.mod, facts, stack, names, uses, mention))):
            return  # the single-device branch of ``if multi_gpu: strategy = ... else: ...``, or a function
        if names and not baseline_before_strategy(ctx, stack, label.rsplit(".", 1)[0] if label else None):
            site, where = call, ""
            owner = ctx.mod.owner(call) if ctx.mod.is_foreign(call) else None
            if owner is not None:  # built in another module of the project: report where it is called
                site = next((st for st in reversed(stack) if isinstance(st, ast.stmt)
                             and not ctx.mod.is_foreign(st)), None)
                if site is None:
                    return
                where = f" [{getattr(getattr(owner, 'path', None), 'name', 'another module')}]"
            what = f"{kind} given to `{label}()`" if label else f"{kind} `{sorted(names)[0]}`"
            ctx.emit("TF001", site, f"{what} created outside strategy.scope(): "
                                    f"its variables live on one device{call_site_note(stack)}{where}")

    walk_scopes(facts, on_call)
    tf_ema.check_ema(ctx)


def check_tf004(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if "run" not in facts.file_features:
        return
    for loop in mod.loops:
        if isinstance(loop, ast.While):
            continue
        src = tfdata.unwrap_iter(mod, loop.iter)
        if tfdata.classify(mod, src) != "tfdata":
            continue
        if "run" in facts.features(loop.body, loop):
            name = dotted(src) or "the dataset"
            ctx.emit("TF004", loop.iter, f"strategy.run fed from `{name}`, a tf.data pipeline that was not "
                                         "passed through strategy.experimental_distribute_dataset()")
    run_inputs.check_tf004_iterators(ctx)


def _in_loop(mod, node: ast.AST) -> bool:
    for anc in mod.ancestors(node):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(anc, (ast.For, ast.AsyncFor, ast.While)):
            return True
    return False


def check_tf005(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if not facts.has_strategy("tf"):
        return
    for call, qn in mod.calls:
        if qn is not None:
            continue
        fns = mod.local_functions(call.func)
        if not fns or not _in_loop(mod, call):
            continue
        summary = facts.summary(fns[0])
        if not (summary & {"tape", "apply"}) or "run" in summary:
            continue
        outer = mod.enclosing_function(call)
        if outer is not None and id(outer) in facts.run_targets:
            continue  # a per-replica function looping over its own micro-steps
        if not _strategy_in_play(ctx, call):
            continue
        ctx.emit("TF005", call, f"`{fns[0].name}` trains but is called directly in a loop: "
                                "it runs on one device, not through strategy.run")


def _mentions_strategy(ctx, node: ast.AST) -> bool:
    cache = ctx.mod.__dict__.setdefault("_mentions_strategy", {})
    if id(node) not in cache:
        facts = ctx.facts
        cache[id(node)] = any(isinstance(n, (ast.Name, ast.Attribute)) and facts.is_strategy_expr(n)
                              for n in ast.walk(node))
    return cache[id(node)]


def _strategy_in_play(ctx, call: ast.Call) -> bool:
    """A loop at module level runs where the strategy is; one inside functions only when one of the enclosing
    functions or classes refers to a strategy (a baseline ``Trainer`` class that never sees it is left alone)."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    scopes = [a for a in ctx.mod.ancestors(call) if isinstance(a, kinds)]
    return not scopes or any(_mentions_strategy(ctx, s) for s in scopes)


def _default_reduction(mod, ctor: ast.Call) -> bool:
    qn = mod.qualname(ctor.func) or ""
    if not (qn.startswith("keras.losses.") and _cap(qn)):
        return False
    red = kwarg(ctor, "reduction")
    if red is None:
        return not any(kw.arg is None for kw in ctor.keywords)
    text = dotted(red) or const_str(red)
    return text is not None and text.upper().rsplit(".", 1)[-1] in ("AUTO", "SUM_OVER_BATCH_SIZE")


def check_tf006(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if not facts.has_strategy("tf"):
        return
    for defs in mod.functions.values():
        for fn in defs:
            if id(fn) not in facts.run_targets:
                continue
            for node in iter_body_nodes(fn.body):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Call):
                    bad = _default_reduction(mod, f)
                else:
                    values = mod.values_of(f)
                    bad = bool(values) and all(isinstance(v, ast.Call) and _default_reduction(mod, v) for v in values)
                if bad:
                    ctx.emit("TF006", node, "per-replica loss with the default Keras reduction: divided by the "
                                            "per-replica batch, not the global one")


def _accumulates(mod, loop) -> bool:
    """The loop is a micro-step loop: ``range(accum_steps)`` or it adds into an accumulator itself."""
    it = getattr(loop, "iter", None)
    if isinstance(it, ast.Call) and (dotted(it.func) in ("range", "tf.range") or
                                     mod.qualname(it.func) == "tensorflow.range"):
        if any("accum" in (dotted(n) or "").lower() for n in ast.walk(it) if isinstance(n, (ast.Name, ast.Attribute))):
            return True
    stack = list(loop.body)
    while stack:
        st = stack.pop()
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, ast.AugAssign) and "accum" in (dotted(st.target) or "").lower():
            return True
        if isinstance(st, ast.Assign):
            names = {dotted(t) for t in st.targets} - {None}
            used = {dotted(n) for n in ast.walk(st.value) if isinstance(n, (ast.Name, ast.Attribute))}
            if any("accum" in n.lower() and n in used for n in names):
                return True
        for n in ast.walk(st) if isinstance(st, ast.Expr) else []:
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "assign_add"
                    and "accum" in (dotted(n.func.value) or "").lower()):
                return True
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(st, field, []) or [])
    return False


def check_tf010(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    for loop in mod.loops:
        if not _accumulates(mod, loop):
            continue
        if "apply_uncond" in facts.features(loop.body, loop):
            ctx.emit("TF010", loop, "gradient-accumulation loop applies gradients on every micro-step")


def _is_tf_function(mod, fn, wrapped: set[str]) -> bool:
    if fn.name in wrapped:
        return True
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if mod.qualname(target) == "tensorflow.function":
            return True
    return False


_GRAPH_MODE = {"tensorflow.Session", "tensorflow.disable_eager_execution", "tensorflow.disable_v2_behavior",
               "tensorflow.InteractiveSession"}


def _keras_compiled_step(mod, fn) -> bool:
    """``train_step``/``test_step``/``predict_step`` of a Keras Model subclass: Keras runs it in a tf.function."""
    cls = mod.parent.get(id(fn))
    return (fn.name in ("train_step", "test_step", "predict_step") and isinstance(cls, ast.ClassDef)
            and bool(mod.class_bases(cls) & _TF_MODEL_BASES))


def check_tf011(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if not facts.has_strategy("tf", multi_device=False):
        return
    if any(qn in _GRAPH_MODE for _, qn in mod.calls):  # TF1 graph mode: strategy.run builds a graph, once
        return
    wrapped = {c.args[0].id for c, qn in mod.calls
               if qn == "tensorflow.function" and c.args and isinstance(c.args[0], ast.Name)}
    graph = reachable_functions(mod, [fn for defs in mod.functions.values() for fn in defs
                                      if _is_tf_function(mod, fn, wrapped)])
    for call, _ in mod.calls:
        if not facts.is_strategy_run(call) or not call.args:
            continue
        if facts.strategy_names.get(dotted(call.func.value) or "", "tf") != "tf":
            continue
        fn_arg = call.args[0]
        targets = mod.local_functions(fn_arg)
        if isinstance(fn_arg, ast.Lambda):  # a lambda cannot be a tf.function
            name = "lambda"
        elif not targets or any(id(t) in graph for t in targets):
            continue
        else:
            name = targets[0].name
        outer = mod.enclosing_function(call)
        if outer is not None and (id(outer) in graph or _keras_compiled_step(mod, outer)):
            continue
        ctx.emit("TF011", call, f"strategy.run({name}) runs eagerly: wrap the step in @tf.function")
