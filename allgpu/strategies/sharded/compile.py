"""``torch.compile`` of a fully sharded model: each innermost FSDP unit's forward is compiled, the hooks stay eager.

In torch 2.13 FSDP2 runs its unit hooks (all-gather before forward, reshard after, reduce-scatter in backward)
under ``torch._dynamo.disable``. Compiling the whole sharded model therefore breaks the graph at every unit, and
where a unit is called inside a loop (``nn.Sequential``, a ``ModuleList`` of blocks) Dynamo gives up on the frame:
``torch.compile(model)`` captured no graph at all and trained eagerly, silently. torchtitan compiles per block
for this reason; so does allgpu: the ``forward`` of every unit that holds no other unit is compiled in place,
FSDP2's hooks run eagerly around it, and modules outside those units (the root's own layers) run eagerly.

Two ways in, as for the mirrored strategies (:mod:`allgpu.core.compiling`): :meth:`FullyShardedStrategy.compile` (and
``fit(compile=True)``), and a user's own ``torch.compile(model)``, which :class:`ShardedCompile` turns into the
same per-unit compilation, with the user's backend and options, at the wrapper's first call (that first call's
root frame is skipped by Dynamo; from the second on the root runs eagerly without trying).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule


def innermost_units(model: nn.Module) -> list[nn.Module]:
    """FSDP units under ``model`` (itself included) that contain no other unit, in module order."""
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    return [u for u in units if not any(isinstance(s, FSDPModule) for s in list(u.modules())[1:])]


def compile_units(model: nn.Module, compile_fn: Callable[[Callable], Callable]) -> int:
    """Replace each innermost unit's ``forward`` with ``compile_fn(forward)``, once per model; returns how many.

    ``compile_fn`` is e.g. ``lambda f: torch.compile(f, backend="inductor")``. Local (no collective)."""
    if getattr(model, "_allgpu_units_compiled", False):
        return 0
    units = innermost_units(model)
    for unit in units:
        unit.forward = compile_fn(unit.forward)
    model._allgpu_units_compiled = True
    return len(units)


def compile_sharded(model: nn.Module, *, backend: str | Callable = "inductor", **compile_kwargs: Any) -> nn.Module:
    """Compile ``model``'s innermost units with ``torch.compile(backend=..., **compile_kwargs)``; returns ``model``.

    Raises:
        ArgumentTypeError: ``model`` is not an ``nn.Module``.
        ArgumentError: an unknown backend name.
    """
    from allgpu.core.compiling import resolve_backend
    from allgpu.errors import ArgumentTypeError

    if not isinstance(model, nn.Module):
        raise ArgumentTypeError(f"compile() takes a torch.nn.Module; got {type(model).__name__}.")
    if isinstance(backend, str):
        resolve_backend(backend)  # an unknown name fails here, not at the first forward
    compile_units(model, lambda fn: torch.compile(fn, backend=backend, **compile_kwargs))
    return model


class ShardedCompile:
    """A global forward pre-hook that compiles a user's ``torch.compile(model)`` of a sharded model per unit.

    It acts on ``OptimizedModule`` wrappers whose module holds FSDP units, once each: the units' forwards are
    compiled with the wrapper's own Dynamo context (its backend, mode and options), and the wrapper's
    ``forward`` becomes the module's eager call.
    """

    def __init__(self):
        from torch.nn.modules import module as nn_module

        self._done: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
        self._handles = [nn_module.register_module_forward_pre_hook(self._enter)]

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _enter(self, module: nn.Module, args) -> None:
        if torch.compiler.is_compiling() or not isinstance(module, torch._dynamo.eval_frame.OptimizedModule):
            return  # is_compiling first: Dynamo folds it to a constant and traces nothing further
        if module in self._done:
            return
        self._done.add(module)
        inner = module._orig_mod
        if not any(isinstance(m, FSDPModule) for m in inner.modules()):
            return
        compile_units(inner, module.dynamo_ctx)
        module.forward = inner.__call__  # the root eagerly from the next call on; its units are compiled
