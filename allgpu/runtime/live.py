"""Which strategies are alive in this process, and the check that a second one does not silently diverge.

A process is one replica; every strategy in it shares the one process group. A second strategy asking for a
different number of replicas than the first one runs with cannot be honoured (the replicas are processes that
already exist, or would be started by re-executing a script that creates the first strategy again), so it is a
:class:`~allgpu.errors.StrategyStartError` naming the first; asking for the same count, or none, joins it.
"""

from __future__ import annotations

import os
import traceback
import weakref

from allgpu.errors import StrategyStartError

_LIVE: list[tuple[weakref.ref, str]] = []
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # allgpu/


def _user_site() -> str:
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE) and "importlib" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "unknown place"


def register(strategy) -> None:
    """Remember ``strategy`` (weakly) with the line of user code that created it."""
    _LIVE.append((weakref.ref(strategy), _user_site()))


def unregister(strategy) -> None:
    _LIVE[:] = [(ref, site) for ref, site in _LIVE if ref() is not None and ref() is not strategy]


def live() -> list[tuple[object, str]]:
    """Strategies not yet closed, oldest first, with where each was created."""
    out = [(ref(), site) for ref, site in _LIVE]
    return [(s, site) for s, site in out if s is not None]


def current():
    """The newest live strategy, or None (``allgpu.compute_average_loss`` uses it)."""
    strategies = live()
    return strategies[-1][0] if strategies else None


def check_second(new_name: str, wanted: int | None, *, joins_group: bool) -> None:
    """Raise when a new strategy asks for ``wanted`` replicas and a live multi-device strategy disagrees.

    Args:
        wanted: replicas the new strategy asks for explicitly (None: whatever is running).
        joins_group: a process group already exists, so the new strategy would join it.
    """
    if wanted is None:
        return
    # Strategies that start or join a job of their own (MirroredStrategy and its subclasses) say so.
    firsts = [(s, site) for s, site in live() if getattr(s, "starts_replicas", False)]
    if firsts:  # one the program dropped without close() is not in the way: collect before judging
        import gc

        gc.collect()
        firsts = [(s, site) for s, site in live() if getattr(s, "starts_replicas", False)]
    if not firsts:
        return
    first, site = firsts[0]
    have = first.num_replicas_in_sync
    if wanted == have or (wanted == 1 and not joins_group):
        return
    raise StrategyStartError(
        f"{new_name} asks for {wanted} replicas, but this process already runs a {type(first).__name__} with "
        f"{have} replica{'s' if have != 1 else ''} (created at {site}). The replicas of a job are processes that "
        f"exist once, so a second strategy cannot have its own count. Fix: reuse the first strategy, or call "
        f"first.close() before creating the second (in a script started as plain python, create one strategy)."
    )


def check_supported(feature: str, strategy=None) -> None:
    """Raise UnsupportedError, before any work is done, when ``strategy`` (default: any live strategy) does not
    offer ``feature`` (``"fit"``, ``"checkpoint"``); its ``unsupported`` dict holds the reason and the fix."""
    from allgpu.errors import UnsupportedError

    candidates = [strategy] if strategy is not None else [s for s, _ in live()]
    for s in candidates:
        reason = getattr(s, "unsupported", {}).get(feature)
        if reason:
            raise UnsupportedError(reason)


def mirror_pending() -> None:
    """Mirror what an open ``strategy.scope()`` of any live strategy created and has not mirrored yet.

    ``fit``, ``evaluate`` and checkpoint save/restore call it first: they are a first use of what the scope built
    (:mod:`allgpu.core.scope_record`). A collective when anything is pending (every replica reaches the same call).
    """
    for strategy, _ in live():
        flush = getattr(strategy, "_mirror_pending", None)
        if flush is not None:
            flush()
