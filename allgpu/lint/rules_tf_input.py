"""TensorFlow rules about input and cluster: TF007 (batch not scaled), TF008/TF009 (tf.data), TF012 (TF_CONFIG)."""

from __future__ import annotations

import ast

from allgpu.lint import tfdata
from allgpu.lint.resolve import has_star_kwargs, kwarg


def _const_int(mod, node: ast.expr | None) -> int | None:
    """An int literal, or a name whose every assignment is the same int literal."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        values = mod.values_of(node)
        ints = {v.value for v in values if isinstance(v, ast.Constant) and type(v.value) is int}
        if values and len(ints) == 1 and len(values) == sum(isinstance(v, ast.Constant) for v in values):
            return ints.pop()
    return None


def check_tf007(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if not facts.has_strategy("tf") or {"num_replicas_in_sync", "get_per_replica_batch_size"} & mod.attrs.keys():
        return
    for call, _ in mod.calls:
        f = call.func
        if not isinstance(f, ast.Attribute):
            continue
        if f.attr == "batch" and call.args and tfdata.classify(mod, f.value) == "tfdata":
            size = _const_int(mod, call.args[0])
        elif f.attr == "fit":
            size = _const_int(mod, kwarg(call, "batch_size"))
        else:
            continue
        if size is not None:
            ctx.emit("TF007", call, f"batch size {size} is fixed: with N replicas each GPU gets {size}/N; "
                                    "scale it by strategy.num_replicas_in_sync")


def check_tf008(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if "prefetch" in mod.attrs or not (facts.file_features & {"fit", "apply", "run"}):
        return
    for call, qn in mod.calls:
        if tfdata.is_tfdata_root(qn):
            ctx.emit("TF008", call, "this tf.data pipeline is never prefetched: add "
                                    ".prefetch(tf.data.AUTOTUNE) as its last step")
            return


def check_tf009(ctx) -> None:
    mod = ctx.mod
    for node in mod.attrs.get("map", []):
        call = mod.parent.get(id(node))
        if not isinstance(call, ast.Call) or call.func is not node:
            continue
        if len(call.args) >= 2 or kwarg(call, "num_parallel_calls") is not None or has_star_kwargs(call):
            continue
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
