"""TensorFlow device placement: TF002 (training pinned with tf.device) and TF003 (set_visible_devices to one GPU).

Both need a reason to believe more than one GPU is wanted: a multi-device strategy, ``multi_gpu_model`` or a
``num_gpus``-style name (:func:`multi_device_intent`), or, for TF002, a script whose whole computation sits in
one ``tf.device('/gpu:0')`` block and names no other GPU (the "why does TensorFlow use only one GPU" case).
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.flow import undistributed_branch
from allgpu.lint.rank_guard import rankish
from allgpu.lint.resolve import const_str, iter_body_nodes, kwarg

_SINGLE_GPU = re.compile(r"^(/?job:[^/]+(/replica:\d+)?(/task:\d+)?)?/?(device:)?(gpu|cuda):\d+$")
_CPU = re.compile(r"^(/?job:[^/]+(/replica:\d+)?(/task:\d+)?)?/?(device:)?cpu:0$")
_INTENT_NAMES = {"num_gpus", "n_gpus", "ngpus", "gpu_count", "num_devices", "n_devices", "n_gpu", "num_gpu",
                 "nr_gpu", "nr_gpus", "nr_tower", "num_towers"}
# TF1 multi-tower trainers (tensorpack's SyncMultiGPUTrainer*, AsyncMultiGPUTrainer; ``MultiGPUTrainer`` classes)
_MULTI_GPU_CLASS = re.compile(r"MultiGPU|MultiGpu")
_ANY_GPU = re.compile(r"""(gpu|GPU|cuda):\s*(\d+)""")


def multi_device_intent(ctx) -> bool:
    """The script means to use several devices: a multi-device tf.distribute strategy, ``multi_gpu_model``, a
    ``num_gpus``/``nr_tower``-style name or a TF1 multi-GPU trainer class (tensorpack's ``SyncMultiGPUTrainer``).
    Without it, pinning or choosing one GPU is simply how a one-GPU script runs."""
    mod = ctx.mod
    return (ctx.facts.has_strategy("tf") or any(n.lower() in _INTENT_NAMES for n in mod.name_ids)
            or "num_gpus" in mod.attrs or "nr_tower" in mod.attrs or "multi_gpu_model" in mod.name_ids
            or "multi_gpu_model" in mod.attrs
            or any(_MULTI_GPU_CLASS.search(n) for n in (*mod.name_ids, *mod.attrs)))


def check_tf002(ctx) -> None:
    """A ``with tf.device('/gpu:K'):`` block that trains while several devices are wanted, or that holds the
    script's whole computation while the script names no other GPU."""
    mod, facts = ctx.mod, ctx.facts
    intent = multi_device_intent(ctx)
    whole = None if intent else _whole_script_pin(mod)
    for call, qn in mod.calls:
        if qn != "tensorflow.device" or not call.args:
            continue
        dev = const_str(call.args[0])
        item = mod.parent.get(id(call))
        if dev is None or not isinstance(item, ast.withitem):
            continue
        with_node = mod.parent[id(item)]
        inner = [n for n in iter_body_nodes(with_node.body)
                 if isinstance(n, ast.Call) and mod.qualname(n.func) == "tensorflow.device"]
        if inner:  # per-tower placement inside: the TF1 multi-tower pattern
            continue
        if _CPU.match(dev.strip().lower()):
            if facts.features(with_node.body, with_node) & {"fit"}:  # Keras training under a CPU pin
                ctx.emit("TF002", call, f"model trained under tf.device({dev!r}): every GPU stays idle")
            continue
        if not _SINGLE_GPU.match(dev.strip().lower()):
            continue
        if intent and facts.features(with_node.body, with_node) & {"fit", "tape", "apply"}:
            ctx.emit("TF002", call, f"training pinned to {dev!r} with tf.device(): the other GPUs stay idle")
        elif with_node is whole:
            ctx.emit("TF002", call, f"the whole computation is pinned to {dev!r} with tf.device(): "
                                    "the other GPUs stay idle")


def _whole_script_pin(mod) -> ast.With | None:
    """The one module-level ``with tf.device(...)`` block that holds every TensorFlow call of a script that names
    no other GPU anywhere (no ``/gpu:1``, no device chosen by a variable, no session config choosing GPUs)."""
    pins = [st for st in mod.tree.body if isinstance(st, ast.With) and any(
        isinstance(it.context_expr, ast.Call) and mod.qualname(it.context_expr.func) == "tensorflow.device"
        for it in st.items)]
    if len(pins) != 1 or not mod.is_imported("tensorflow"):
        return None
    if {m.group(2) for m in _ANY_GPU.finditer(mod.source)} - {"0"}:
        return None
    devices = [c for c, qn in mod.calls if qn == "tensorflow.device"]
    if any(const_str(c.args[0]) is None for c in devices if c.args) or "visible_device_list" in mod.source:
        return None
    pin = pins[0]
    inside = {id(n) for n in iter_body_nodes(pin.body)}
    tf_calls = [c for c, qn in mod.calls if qn and qn.startswith("tensorflow.") and qn != "tensorflow.device"]
    if not tf_calls or any(id(c) not in inside for c in tf_calls if mod.enclosing_function(c) is None):
        return None
    return pin


def _narrow_list(mod, node: ast.expr) -> bool:
    """``gpus[0]``, ``gpus[:1]``, ``[gpus[0]]``: exactly one device, chosen by a constant."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return len(node.elts) == 1 and _narrow_list(mod, node.elts[0])
    if isinstance(node, ast.Subscript):
        sl = node.slice
        if isinstance(sl, ast.Constant) and isinstance(sl.value, int):
            return True
        if isinstance(sl, ast.Slice) and sl.step is None:
            lo = sl.lower.value if isinstance(sl.lower, ast.Constant) else (0 if sl.lower is None else None)
            hi = sl.upper.value if isinstance(sl.upper, ast.Constant) else None
            return isinstance(lo, int) and isinstance(hi, int) and hi - lo == 1
    return False


def _one_per_loop(mod, device: ast.expr, call: ast.Call) -> bool:
    """``for i in ids: set_visible_devices(gpus[int(i)], 'GPU')``: one device per call, in a loop meant to
    list several (an index read from the rank, as Horovod does, is one GPU per process on purpose)."""
    if not isinstance(device, ast.Subscript) or isinstance(device.slice, ast.Slice) or rankish(device.slice):
        return False
    for anc in mod.ancestors(call):
        if isinstance(anc, (ast.For, ast.AsyncFor)):
            return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
    return False


def check_tf003_visible(ctx) -> None:
    """``tf.config.set_visible_devices`` with one GPU (CUDA_VISIBLE_DEVICES is in rules_env)."""
    mod = ctx.mod
    intent = multi_device_intent(ctx)
    for call, qn in mod.calls:
        if qn not in ("tensorflow.config.set_visible_devices", "tensorflow.config.experimental.set_visible_devices"):
            continue
        if not call.args:
            continue
        dtype = call.args[1] if len(call.args) > 1 else kwarg(call, "device_type")
        dtype_s = const_str(dtype) if dtype is not None else "GPU"
        if dtype_s is None or dtype_s.upper() != "GPU":
            continue
        if _one_per_loop(mod, call.args[0], call):
            ctx.emit("TF003", call, "tf.config.set_visible_devices() called once per GPU in a loop: each call "
                                    "replaces the last, so only the last GPU stays visible")
        elif intent and _narrow_list(mod, call.args[0]) and not undistributed_branch(ctx.facts, [call]):
            ctx.emit("TF003", call, "tf.config.set_visible_devices() leaves one GPU visible: "
                                    "a strategy can only use that one")
