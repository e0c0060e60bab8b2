"""Raw TensorFlow ops with a ``keras.ops`` / ``keras.random`` twin taking the same positional arguments.

A custom ``train_step`` moved from TensorFlow (keras-io's DCGAN and VAE) builds its batch with ``tf.shape``,
``tf.concat``, ``tf.random.normal``, ``tf.reduce_mean``...; Keras 3 has each under ``keras.ops`` / ``keras.random``
with the same parameters in the same order, running on any backend's tensors (PyTorch's here). Only these are
rewritten, and only when every keyword the call passes is one the twin has under the same name; anything else
stays a raw op, reported with its line (``names.WHY_OP``).
"""

from __future__ import annotations

import libcst as cst

# TensorFlow name -> (Keras 3 name, keywords both accept with the same meaning)
TWINS: dict[str, tuple[str, frozenset[str]]] = {
    "tensorflow.shape": ("keras.ops.shape", frozenset()),
    "tensorflow.concat": ("keras.ops.concatenate", frozenset({"axis"})),
    "tensorflow.stack": ("keras.ops.stack", frozenset({"axis"})),
    "tensorflow.ones": ("keras.ops.ones", frozenset({"shape", "dtype"})),
    "tensorflow.zeros": ("keras.ops.zeros", frozenset({"shape", "dtype"})),
    "tensorflow.square": ("keras.ops.square", frozenset()),
    "tensorflow.sqrt": ("keras.ops.sqrt", frozenset()),
    "tensorflow.exp": ("keras.ops.exp", frozenset()),
    "tensorflow.abs": ("keras.ops.abs", frozenset()),
    "tensorflow.reduce_mean": ("keras.ops.mean", frozenset({"axis", "keepdims"})),
    "tensorflow.reduce_sum": ("keras.ops.sum", frozenset({"axis", "keepdims"})),
    "tensorflow.reduce_max": ("keras.ops.max", frozenset({"axis", "keepdims"})),
    "tensorflow.reduce_min": ("keras.ops.min", frozenset({"axis", "keepdims"})),
    "tensorflow.random.normal": ("keras.random.normal", frozenset({"shape", "mean", "stddev", "dtype", "seed"})),
    "tensorflow.random.uniform": ("keras.random.uniform", frozenset({"shape", "minval", "maxval", "dtype", "seed"})),
}


def twin(qualified: str, call: cst.Call) -> str | None:
    """The Keras 3 name ``call`` (of TensorFlow's ``qualified``) becomes, or None when it has none or passes a
    keyword the twin lacks (``tf.reduce_mean(input_tensor=x)``, ``tf.random.normal(shape, name=...)``)."""
    target, keywords = TWINS.get(qualified, (None, frozenset()))
    if target is None or any(a.keyword is not None and a.keyword.value not in keywords for a in call.args):
        return None
    if any(a.star for a in call.args):  # *args / **kwargs: what they hold cannot be checked
        return None
    return target
