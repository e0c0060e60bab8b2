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
