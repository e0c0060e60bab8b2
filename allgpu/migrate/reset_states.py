"""Keras 2's ``.reset_states()``: renamed where the object is certainly a metric or an RNN layer, else reported.

In the installed Keras 3 a metric has only ``reset_state()`` (``keras/src/metrics/metric.py``); an RNN layer and
``Bidirectional`` keep ``reset_states()`` as a "compatibility alias" of ``reset_state()``
(``keras/src/layers/rnn/rnn.py``, ``bidirectional.py``), so ``reset_state()`` is right for both. A Keras 2
``Model.reset_states()`` (reset every stateful layer) has no Keras 3 equivalent at all, and an object migrate cannot
trace may be either: those calls are reported with the line and why, never guessed.
"""

from __future__ import annotations

import libcst as cst

from allgpu.migrate import names
from allgpu.migrate.cst import dotted

METRIC, RNN, MODEL = "metric", "rnn", "model"
RNN_LAYERS = frozenset({"RNN", "SimpleRNN", "LSTM", "GRU", "Bidirectional", "ConvLSTM1D", "ConvLSTM2D",
                        "ConvLSTM3D"})
WHY_MODEL = ("Keras 3 models have no reset_states() (nor reset_state()): reset their stateful layers, "
             "`for layer in model.layers:` / `if getattr(layer, \"stateful\", False): layer.reset_state()`")
WHY_UNKNOWN = ("Keras 3 metrics have only reset_state() and RNN layers have both, but a Keras 2 model's "
               "reset_states() has no Keras 3 equivalent, and migrate cannot tell which this object is: write "
               "reset_state() for a metric or an RNN layer; for a model, call reset_state() on each stateful layer")


def _canonical(path: str, aliases: dict[str, str]) -> str:
    """A module path with TensorFlow's spellings of Keras written as Keras 3's (``tensorflow.keras.x`` -> ``keras.x``,
    ``tensorflow.metrics`` -> ``keras.metrics``); ``tf.x`` through the script's TensorFlow aliases first."""
    head, _, rest = path.partition(".")
    if head in aliases:
        path = aliases[head] + ("." + rest if rest else "")
    for tf_name in ("tensorflow.keras", "tensorflow.metrics", "tensorflow.losses", "tensorflow.optimizers"):
        if path == tf_name or path.startswith(tf_name + "."):
            return "keras" + path[len("tensorflow.keras" if tf_name == "tensorflow.keras" else "tensorflow"):]
    return path


def _bindings(module: cst.Module) -> dict[str, str]:
    """Local names the script's imports bind to Keras modules or names: ``{"K": "keras", "Mean": "keras.metrics.Mean"}``."""
    bound: dict[str, str] = {}

    class _Imports(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            for alias in node.names:
                full = _canonical(dotted(alias.name) or "", {})
                if full.split(".")[0] == "keras":
                    bound[alias.asname.name.value if alias.asname else "keras"] = full if alias.asname else "keras"

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if node.relative or isinstance(node.names, cst.ImportStar):
                return
            module_name = _canonical(dotted(node.module) or "", {})
            for alias in node.names:
                full = _canonical(f"{module_name}.{dotted(alias.name)}", {})
                if full.split(".")[0] == "keras":
                    bound[alias.asname.name.value if alias.asname else alias.name.value] = full

    module.visit(_Imports())
    return bound


def _kind(call: cst.BaseExpression, aliases: dict[str, str], bound: dict[str, str]) -> str | None:
    """What a constructor call builds: a metric, an RNN layer, a model, or None (not known)."""
    name = dotted(call.func) if isinstance(call, cst.Call) else None
    if not name:
        return None
    head, _, rest = name.partition(".")
    path = _canonical(bound[head] + ("." + rest if rest else "") if head in bound else name, aliases)
    if path.startswith("keras.metrics."):
        return METRIC
    if path.startswith("keras.layers.") and path.rsplit(".", 1)[-1] in RNN_LAYERS:
        return RNN
    if path in names.KERAS_MODEL_CALLS or path.startswith(names.KERAS_MODEL_PREFIXES):
        return MODEL
    return None


def receivers(module: cst.Module, aliases: dict[str, str]) -> dict[str, str | None] | None:
    """None when the script imports neither TensorFlow nor Keras (its ``reset_states`` are none of Keras 2's); else
    each name (``loss``, ``self.tracker``) the script assigns -> what it holds (:data:`METRIC`, :data:`RNN`,
    :data:`MODEL`, or None when assigned something else, or different kinds in different places); a ``for``
    variable over ``<anything>.metrics`` is a metric."""
    bound = _bindings(module)
    if not aliases and not bound:
        return None
    found: dict[str, str | None] = {}

    def record(target: cst.BaseExpression, kind: str | None) -> None:
        name = dotted(target)
        if name:
            found[name] = kind if found.get(name, kind) == kind else None

    class _Assigns(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                record(target.target, _kind(node.value, aliases, bound))

        def visit_For(self, node: cst.For) -> None:
            over = dotted(node.iter)
            record(node.target, METRIC if over and over.rsplit(".", 1)[-1] == "metrics" else None)

    module.visit(_Assigns())
    return found


def rewrite(call: cst.Call, known: dict[str, str | None]) -> tuple[cst.Call, str, str | None]:
    """``call`` is ``X.reset_states()``: ``(new call, receiver, None)`` renamed to ``reset_state()`` where ``X`` is
    a metric or an RNN layer, else ``(call, receiver, why)`` with the reason it was left."""
    receiver = dotted(call.func.value) or cst.Module(body=[]).code_for_node(call.func.value)
    kind = known.get(receiver)
    if kind in (METRIC, RNN):
        return call.with_changes(func=call.func.with_changes(attr=cst.Name("reset_state"))), receiver, None
    return call, receiver, WHY_MODEL if kind == MODEL else WHY_UNKNOWN


def is_reset_states(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "reset_states" and not call.args
