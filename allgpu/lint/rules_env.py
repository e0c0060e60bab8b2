"""``CUDA_VISIBLE_DEVICES`` narrowed to one GPU in code: TF003 in a TensorFlow script, PT010 otherwise."""

from __future__ import annotations

import ast

from allgpu.lint.flow import undistributed_branch
from allgpu.lint.resolve import const_str, literal_text
from allgpu.lint.rules_tf_device import multi_device_intent
from allgpu.lint.rules_torch_device import one_process_only

_KEY = "CUDA_VISIBLE_DEVICES"


def narrowed(text: str) -> bool:
    """True for exactly one visible device (``"0"``, ``"3"``, ``"GPU-8f2..."``); not for ``"-1"``, ``""``, ``"0,1"``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return len(parts) == 1 and not parts[0].startswith("-")


def env_sets(mod):
    """Every place the code sets CUDA_VISIBLE_DEVICES: ``(node, value expression)``."""
    for target, value in mod.subscript_assigns:
        if mod.qualname(target.value) == "os.environ" and const_str(target.slice) == _KEY:
            yield target, value
    for call, qn in mod.calls:
        if qn in ("os.environ.setdefault", "os.putenv") and len(call.args) >= 2 and const_str(call.args[0]) == _KEY:
            yield call, call.args[1]
        elif qn == "os.environ.update":
            for kw in call.keywords:
                if kw.arg == _KEY:
                    yield call, kw.value
            if call.args and isinstance(call.args[0], ast.Dict):
                for k, v in zip(call.args[0].keys, call.args[0].values):
                    if const_str(k) == _KEY:
                        yield call, v


def check_visible_devices(ctx) -> None:
    mod = ctx.mod
    is_tf = mod.is_imported("tensorflow") or mod.is_imported("keras")
    is_torch = mod.is_imported("torch") or mod.is_imported("allgpu")
    rule = "PT010" if is_torch and not is_tf else "TF003"
    if rule == "TF003" and not multi_device_intent(ctx):  # a one-GPU TensorFlow script choosing its GPU
        return
    for node, value in env_sets(mod):
        text = literal_text(mod, value)
        if text is not None and narrowed(text) and not one_process_only(mod, node) and not (
                rule == "TF003" and undistributed_branch(ctx.facts, [node])):
            ctx.emit(rule, node, f"CUDA_VISIBLE_DEVICES set to {text!r} in code: only that GPU is visible")
