"""Which strategy is current, and in which context: ``tf.distribute``'s ``get_strategy``, ``has_strategy``,
``in_cross_replica_context`` and ``get_replica_context``.

As in TensorFlow, the current strategy is per thread: ``with strategy.scope():`` makes ``strategy`` current in the
*cross-replica context* (``get_replica_context()`` is None there), and ``strategy.run(fn)`` runs ``fn`` in its
*replica context* (``get_replica_context()`` is a :class:`ReplicaContext` whose ``all_reduce`` and ``all_gather``
meet the other replicas). Outside both, ``get_strategy()`` is the default strategy
(:class:`allgpu.strategies.default.DefaultStrategy`: one replica, nothing mirrored) and ``get_replica_context()``
its replica context, as TensorFlow's.

allgpu runs one replica per process, so the replica context is this process's replica; code written for
``tf.distribute`` that calls ``get_replica_context().all_gather(...)`` inside a loss runs unchanged.
"""

from __future__ import annotations

from allgpu.runtime.lone_replica import warn_if_one_of_several
from allgpu.strategies.base.current import entered, stack as _stack
from allgpu.strategies.base.replica_context import ReplicaContext
from allgpu.strategies.default import default_strategy


def get_strategy():
    """The strategy whose ``scope()`` (or ``run()``) is open in this thread, else the default strategy
    (``tf.distribute.get_strategy``). Local."""
    stack = _stack()
    if stack:
        return stack[-1][0]
    strategy = default_strategy()
    warn_if_one_of_several("allgpu.get_strategy() outside any scope (the default strategy)", str(strategy.device))
    return strategy


def has_strategy() -> bool:
    """True inside a strategy's ``scope()`` or ``run()`` in this thread (``tf.distribute.has_strategy``); False
    for the default strategy (inside its replica context's ``merge_call``), as TensorFlow's."""
    stack = _stack()
    return bool(stack) and stack[-1][0] is not default_strategy()


def in_cross_replica_context() -> bool:
    """True inside ``scope()`` but not inside ``run()`` (``tf.distribute.in_cross_replica_context``): there
    ``get_replica_context()`` is None and collectives go through the strategy (``strategy.reduce``)."""
    stack = _stack()
    return bool(stack) and not stack[-1][1]


def get_replica_context() -> ReplicaContext | None:
    """This replica's :class:`ReplicaContext` inside ``strategy.run(fn)``; None in the cross-replica context (inside
    ``scope()``, outside ``run()``); outside any strategy the default strategy's, a world of one
    (``tf.distribute.get_replica_context``). Local."""
    stack = _stack()
    if not stack:
        return get_strategy().replica_context()
    strategy, replica = stack[-1]
    return strategy.replica_context() if replica else None


__all__ = ["ReplicaContext", "entered", "get_replica_context", "get_strategy", "has_strategy", "in_cross_replica_context"]
