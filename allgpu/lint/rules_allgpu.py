"""allgpu rule AG001: a model built outside ``strategy.scope()`` in a script that uses an allgpu strategy."""

from __future__ import annotations

import ast

from allgpu.lint.flow import emit_outside_scope
from allgpu.lint.resolve import dotted, kwarg

_NOT_MODELS = ("torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel", "torch.nn.Parameter",
               "torch.nn.Module", "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList")


def torch_model_creation(mod, call: ast.Call) -> bool:
    """True when ``call`` builds a ``torch.nn.Module`` that is a model (not a loss)."""
    qn = mod.qualname(call.func)
    if qn:
        last = qn.rsplit(".", 1)[-1]
        if qn.startswith("torch.nn.") and qn.count(".") == 2 and last[:1].isupper():
            return qn not in _NOT_MODELS and not last.endswith("Loss")
        if qn.startswith("torchvision.models.") or qn in ("timm.create_model",):
            return True
        return qn.startswith("transformers.") and qn.endswith("from_pretrained")
    cls = mod.local_class(call.func)
    return cls is not None and "torch.nn.Module" in mod.class_bases(cls)


def _trained(mod) -> set[str]:
    out: set[str] = set()
    for call, qn in mod.calls:
        f = call.func
        if qn == "allgpu.fit" or (isinstance(f, ast.Attribute) and f.attr == "fit" and qn is None):
            model = call.args[0] if call.args else kwarg(call, "model")
            if dotted(model):
                out.add(dotted(model))
        elif qn and qn.startswith("torch.optim.") and call.args:
            arg = call.args[0]
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "parameters":
                name = dotted(arg.func.value)
                if name:
                    out.add(name)
        elif isinstance(f, ast.Attribute) and f.attr == "train" and not call.args and dotted(f.value):
            out.add(dotted(f.value))
    return out


def check_ag001(ctx) -> None:
    mod = ctx.mod
    if not ctx.facts.has_strategy("allgpu", multi_device=False):
        return
    emit_outside_scope(ctx, "AG001", lambda c: torch_model_creation(mod, c), _trained(mod),
                       lambda kind, name: f"model `{name}` built outside strategy.scope(): allgpu will not mirror it")


def _global_batch_names(mod) -> set[str]:
    """Names passed as ``global_batch_size=`` in the script, plus any name that spells "global batch"."""
    names = set()
    for call, _ in mod.calls:
        name = dotted(kwarg(call, "global_batch_size"))
        if name:
            names.add(name)
    return names


def _is_sum(mod, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr == "sum" and not node.args:
        return True
    return mod.qualname(node.func) == "torch.sum"


def check_ag002(ctx) -> None:
    """A summed loss divided by the global batch by hand: under allgpu's averaged gradients, lr / N."""
    mod, facts = ctx.mod, ctx.facts
    if not facts.has_strategy("allgpu", multi_device=False):
        return
    known = _global_batch_names(mod)
    for node in ast.walk(mod.tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _is_sum(mod, node.left)):
            continue
        name = dotted(node.right) or ""
        plain = name.rsplit(".", 1)[-1].lower().replace("_", "")
        if name in known or "globalbatch" in plain:
            ctx.emit("AG002", node, f"loss summed and divided by the global batch `{name}` by hand: allgpu averages "
                                    "gradients across replicas, so this divides the learning rate by "
                                    "num_replicas_in_sync; use allgpu.compute_average_loss(per_example_loss, "
                                    f"{name}) or the per-replica mean")
