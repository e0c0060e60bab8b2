"""The per-thread stack of current strategies and contexts that :mod:`allgpu.strategies.base.context` answers from.

Its own module so that ``ReplicaContext.merge_call`` (which enters the cross-replica context) and ``context``
(which returns ``ReplicaContext`` objects) need not import each other.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_LOCAL = threading.local()  # .stack: [(strategy, in_replica_context)], innermost last


def stack() -> list:
    """This thread's ``[(strategy, in_replica_context), ...]``, innermost last."""
    if not hasattr(_LOCAL, "stack"):
        _LOCAL.stack = []
    return _LOCAL.stack


@contextlib.contextmanager
def entered(strategy, replica: bool) -> Iterator[None]:
    """Make ``strategy`` current in this thread (``replica``: its replica context, else cross-replica) for the
    ``with`` block. Called by ``scope()`` and ``merge_call`` (cross-replica) and ``run()`` (replica)."""
    frames = stack()
    frames.append((strategy, replica))
    try:
        yield
    finally:
        frames.pop()
