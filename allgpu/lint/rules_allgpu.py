"""allgpu rules: AG001 a model built outside ``strategy.scope()``; AG002 a loss divided by the global batch by
hand; AG003 a model too large to mirror (parameters, gradients and optimizer state over an 80 GiB GPU) under a
strategy that keeps a full copy per replica; AG004 out-of-memory errors caught under such a strategy."""

from __future__ import annotations

import ast

from allgpu.devices.advice import MemoryFit, human_bytes, memory_finding, optimizer_slots
from allgpu.lint.astutil import literal_text
from allgpu.lint.flow import emit_outside_scope
from allgpu.lint.model_size import ParamCounter, pretrained_name, size_in_name
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


def _mirrored(mod) -> set[str]:
    """Names handed to ``<strategy>.mirror(...)``: the documented way to mirror a model built outside the scope
    (``model = strategy.mirror(model)``, the DDP port's ``self.model = strategy.mirror(self.model)``), each with its
    last part, so a model built as ``model`` and mirrored as ``self.model`` in the class it is handed to counts.
    Before, the form the docs and the NotMirroredError name as the fix was itself an AG001 error (seen linting
    ported ddp-tutorial-series multinode.py and torchvision's classification train.py)."""
    out: set[str] = set()
    for call, _ in mod.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "mirror" and call.args:
            arg = call.args[0]
            while isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute):  # mirror(model.to(device))
                arg = arg.func.value
            name = dotted(arg)
            if name:
                out.update((name, name.rsplit(".", 1)[-1]))
    return out


def check_ag001(ctx) -> None:
    mod = ctx.mod
    if not ctx.facts.has_strategy("allgpu", multi_device=False):
        return
    emit_outside_scope(ctx, "AG001", lambda c: torch_model_creation(mod, c), _trained(mod) - _mirrored(mod),
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


# ---- AG003: a model too large to mirror -----------------------------------------------------------------------
# The device a script is judged against when the lint cannot know the machine: an 80 GiB GPU (A100 / H100 80GB),
# the largest common single GPU. A model whose state exceeds MEMORY_HEADROOM of it fits no common GPU mirrored.
REFERENCE_DEVICE_BYTES = 80 * 2 ** 30
_MIRRORING = ("MirroredStrategy", "OneDeviceStrategy", "MultiWorkerMirroredStrategy", "CentralStorageStrategy")
_SHARDING = ("FullyShardedStrategy", "ParameterServerStrategy")
_HALF = ("torch.float16", "torch.bfloat16", "torch.half", "float16", "bfloat16", "auto")
_QUANTISED = ("load_in_8bit", "load_in_4bit", "quantization_config", "device_map")


def _pretrained_model(mod, call: ast.Call, qn: str | None) -> bool:
    """``transformers.<X>.from_pretrained`` where X is a model class (not a tokenizer, config or processor)."""
    if not (qn and qn.startswith("transformers.") and qn.endswith(".from_pretrained")):
        return False
    cls = qn.rsplit(".", 2)[-2]
    return "Model" in cls or "For" in cls


def _optimizer(mod) -> tuple[str | None, int]:
    """The optimizer the file builds (class name) and its state tensors per parameter; ``(None, 0)`` when none is
    seen. Several: the fewest slots (a lower bound); an 8-bit optimizer counts 0 (its state is a quarter size)."""
    found = []
    for call, qn in mod.calls:
        module, _, last = (qn or "").rpartition(".")
        if "optim" not in module or not last[:1].isupper() or "lr_scheduler" in module or "Scheduler" in last \
                or last.startswith("LR"):
            continue
        momentum = kwarg(call, "momentum")
        has_momentum = momentum is not None and not (isinstance(momentum, ast.Constant) and not momentum.value)
        found.append((0 if "8bit" in last.lower() else optimizer_slots(last, has_momentum), last))
    if not found:
        return None, 0
    slots, name = min(found)
    return name, slots


def _half_file(mod) -> bool:
    """The file casts something to 16 bits (``.half()``, ``.bfloat16()``, ``.to(torch.bfloat16)``)."""
    for call, qn in mod.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr in ("half", "bfloat16") and not call.args:
            return True
        if isinstance(f, ast.Attribute) and f.attr in ("to", "set_default_dtype") or qn == "torch.set_default_dtype":
            if any(mod.qualname(a) in _HALF for a in call.args):
                return True
    return False


def _frozen_or_adapted(mod) -> bool:
    """Parameters frozen, adapters (PEFT/LoRA) or quantisation: the trainable share cannot be read."""
    if mod.is_imported("peft") or "requires_grad_" in mod.attrs:
        return True
    return any(isinstance(v, ast.Constant) and v.value is False for k, vals in mod.assigns.items()
               if k.endswith(".requires_grad") for v in vals)


def _largest_model(mod, half: bool) -> tuple[ast.Call, float, int, str] | None:
    """``(call, parameters, bytes per parameter, what)`` for the largest model the file's source sizes."""
    counter, best = ParamCounter(mod), None
    for call, qn in mod.calls:
        if _pretrained_model(mod, call, qn):
            if any(kwarg(call, k) is not None for k in _QUANTISED):
                continue
            name = pretrained_name(mod, call)
            params = size_in_name(name) if name else None
            dtype = kwarg(call, "torch_dtype") or kwarg(call, "dtype")
            width = 2 if dtype is not None and (mod.qualname(dtype) in _HALF or literal_text(mod, dtype) in _HALF) \
                or half else 4
            what = f"`{name}`"
        elif torch_model_creation(mod, call):
            params, width, what = counter.params(call), 2 if half else 4, f"`{ast.unparse(call.func)}` (its layers)"
        else:
            continue
        if params and (best is None or params * width > best[1] * best[2]):
            best = (call, params, width, what)
    return best


def check_ag003(ctx) -> None:
    """A model whose parameters, gradients and optimizer state do not fit an 80 GiB GPU, under a strategy that
    keeps a full copy per replica: suggest FullyShardedStrategy."""
    mod, facts = ctx.mod, ctx.facts
    kinds = {kind for _, fw, kind in facts.strategy_calls if fw == "allgpu"}
    if not kinds & set(_MIRRORING) or kinds & set(_SHARDING) or _frozen_or_adapted(mod):
        return
    optimizer, slots = _optimizer(mod)
    if optimizer is None and not any(qn == "allgpu.fit" for _, qn in mod.calls):
        return  # no training seen: inference holds no gradients or optimizer state
    found = _largest_model(mod, _half_file(mod))
    if found is None:
        return
    call, params, width, what = found
    if kinds & set(_MIRRORING) == {"CentralStorageStrategy"}:
        optimizer, slots = None, 0  # its optimizer state lives on the central device (the host by default)
    fit = MemoryFit(int(params), int(params) * width, int(params) * width, optimizer, slots, 1,
                    REFERENCE_DEVICE_BYTES, sorted(kinds & set(_MIRRORING))[0])
    if memory_finding(fit) is None:
        return
    state = f"gradients and {optimizer} state ({slots} per parameter)" if optimizer else "gradients"
    ctx.emit("AG003", call, f"{what} has about {params / 1e9:.1f}B parameters: with {state} that is "
                            f"{human_bytes(fit.mirrored_bytes)} on every replica under {fit.strategy}, more than "
                            f"fits an 80 GiB GPU; use allgpu.FullyShardedStrategy() (at least "
                            f"{fit.devices_needed} such GPUs) to shard it across the replicas"
                            + (", built under torch.device('meta') in its scope (its parameters alone exceed the "
                               "GPU)" if fit.param_bytes > fit.budget else ""))


_OOM = ("torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError")


def _catches_oom(mod, handler: ast.ExceptHandler) -> bool:
    """``except torch.cuda.OutOfMemoryError`` (or in a tuple), or ``except RuntimeError as e`` whose body tests
    for ``"out of memory"`` (the spelling before torch 1.13)."""
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    if any(mod.qualname(t) in _OOM for t in types if t is not None):
        return True
    if not any(isinstance(t, ast.Name) and t.id == "RuntimeError" for t in types):
        return False
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "out of memory" in n.value.lower()
               for stmt in handler.body for n in ast.walk(stmt))


def check_ag004(ctx) -> None:
    """Out-of-memory errors caught and handled in a script that mirrors the model: say what sharding would free."""
    mod, facts = ctx.mod, ctx.facts
    kinds = {kind for _, fw, kind in facts.strategy_calls if fw == "allgpu"}
    if not kinds & set(_MIRRORING) or kinds & set(_SHARDING):
        return
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None and _catches_oom(mod, node):
            ctx.emit("AG004", node)
            return
