"""A ``keras.Model`` subclass that Keras 3 cannot build: sub-models as attributes, a ``train_step`` calling them,
no ``call()``.

TensorFlow's Keras 2 ran ``fit`` on such a model (keras-io's DCGAN before Keras 3); Keras 3 builds a model by
calling it on a batch first, which fails without ``call()``. keras-io's Keras 3 GAN ends its ``__init__`` with
``self.built = True``. Migrate does not add it (whether the sub-models are built is not always visible): it says
so at the class, with the line.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from allgpu.migrate.cst import dotted

_MODEL_BASES = {"keras.Model", "keras.models.Model", "Model"}
NOTE = ("a keras.Model with a train_step and no call(): Keras 3 builds a model by calling it, so fit stops "
        "('Unable to automatically build the model'; allgpu: UnsupportedError); TensorFlow's Keras 2 did not. Fix: "
        "end its __init__ with `self.built = True` (its sub-models built with keras.Input), as keras-io's Keras 3 "
        "GAN does, or define call()")


def needs_built(node: cst.ClassDef) -> bool:
    """Whether ``node`` (its bases already renamed to Keras 3's) subclasses a Keras model, defines ``__init__`` and
    ``train_step`` but neither ``call`` nor ``build``, and never sets ``self.built`` (a subclass without its own
    ``__init__`` is built functionally, ``CustomModel(inputs, outputs)``, and has Functional's call)."""
    if not any(dotted(base.value) in _MODEL_BASES for base in node.bases):
        return False
    methods = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
    if not {"__init__", "train_step"} <= methods or methods & {"call", "build"}:  # no __init__: built functionally
        return False
    sets_built = m.findall(node, m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name("built"))))
    return not sets_built
