"""``allgpu.ReduceOp``: the reduction names of ``strategy.reduce``, spelled as ``tf.distribute.ReduceOp``."""

from __future__ import annotations

import enum


class ReduceOp(str, enum.Enum):
    """How ``strategy.reduce`` combines one value per replica (``tf.distribute.ReduceOp``; MAX and MIN added).

    Members are also their strings (``ReduceOp.SUM == "sum"``), so ``strategy.reduce(allgpu.ReduceOp.SUM, x)``,
    ``strategy.reduce("sum", x)`` and ``strategy.reduce(tf.distribute.ReduceOp.SUM, x)`` are the same call.
    """

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
