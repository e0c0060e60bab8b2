"""``torch.compile`` that keeps gradient all-reduce overlapping the backward pass.

A compiled model's backward is one AOT-autograd graph: every parameter's gradient is accumulated, and so every
post-accumulate-grad hook of :class:`allgpu.core.sync.GradientSync` fires, only when that graph has run to its end,
so no all-reduce could start before the backward is over. DDP solves this with Dynamo's ``DDPOptimizer``
(``torch/_dynamo/backends/distributed.py``): it splits the captured FX graph at bucket boundaries, counting
parameter bytes in reverse graph order, and compiles each piece with the real backend. Each piece's backward is
then its own autograd node, and the gradients of the last layers are accumulated -- and their buckets launched --
while the earlier layers' backward still runs. This module hands allgpu's bucket sizes to that same class; it
writes no splitter of its own.

Two ways in: :meth:`Strategy.compile` (and ``fit(compile=True)``) compile with the splitting backend directly;
for a user's own ``torch.compile(model)``, :class:`CompileOverlap` does what ``torch.distributed._composable.
replicate`` does for DDP: while a compiled wrapper (``OptimizedModule``) of mirrored parameters runs forward, it
names an active "DDP module" with allgpu's bucket size, and Dynamo's frame converter then applies
``DDPOptimizer`` itself. ``model.compile()`` (compiled in place, no wrapper) trains correctly but without overlap.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

import torch

from allgpu.errors import ArgumentError, ArgumentTypeError
from allgpu.core.sync import FIRST_BUCKET_BYTES, GradientSync


def resolve_backend(backend: str | Callable) -> Callable:
    """The Dynamo compiler function behind ``backend`` (a name such as ``"inductor"``, or a callable).

    Raises:
        ValueError: an unknown backend name (the message lists ``torch._dynamo.list_backends()``).
    """
    if callable(backend):
        return backend
    try:
        return torch._dynamo.lookup_backend(backend)
    except Exception as exc:  # Dynamo raises InvalidBackend, a RuntimeError subclass, for unknown names
        raise ArgumentError(f"torch.compile backend {backend!r} is unknown; expected one of "
                         f"{sorted(torch._dynamo.list_backends(exclude_tags=()))}.") from exc


def bucketed_backend(backend: str | Callable, sync: GradientSync) -> Callable:
    """A Dynamo backend that splits graphs at ``sync``'s bucket boundaries, then compiles each with ``backend``.

    With nothing to all-reduce (one replica, no accumulation) the backend is returned unsplit: splitting only
    costs fusion opportunities there.
    """
    compile_fn = resolve_backend(backend)
    if not sync.needed:
        return compile_fn
    from torch._dynamo.backends.distributed import DDPOptimizer

    first = min(FIRST_BUCKET_BYTES, sync.bucket_cap_bytes)
    return DDPOptimizer(bucket_bytes_cap=sync.bucket_cap_bytes, backend_compile_fn=compile_fn,
                        first_bucket_cap=first).compile_fn


def compile_model(model: torch.nn.Module, sync: GradientSync, *, backend: str | Callable = "inductor",
                  **compile_kwargs: Any) -> torch.nn.Module:
    """``torch.compile(model, backend=bucketed_backend(backend, sync), **compile_kwargs)``.

    Returns the ``OptimizedModule``; its parameters are ``model``'s own (an optimizer built on ``model`` keeps
    working). ``compile_kwargs`` are ``torch.compile``'s (``mode``, ``dynamic``, ``fullgraph``, ``options``).
    """
    if not isinstance(model, torch.nn.Module):
        raise ArgumentTypeError(f"compile() takes a torch.nn.Module; got {type(model).__name__}.")
    tuned = compile_kwargs.get("mode") is not None or bool(compile_kwargs.get("options"))
    if tuned and backend != "inductor":
        raise ArgumentError(f"mode= and options= are inductor's; backend={backend!r}. Fix: drop them or use inductor.")
    if tuned:
        # torch.compile passes mode/options to inductor only when it is named by string; keep them with it.
        from torch._inductor import list_mode_options
        from torch._inductor.compile_fx import compile_fx

        inner = compile_fx
        options = dict(compile_kwargs.pop("options", None) or {})
        mode = compile_kwargs.pop("mode", None)
        if mode is not None:
            options.update(list_mode_options(mode, compile_kwargs.get("dynamic")))
        backend = _with_options(inner, options)
    compiled = torch.compile(model, backend=bucketed_backend(backend, sync), **compile_kwargs)
    compiled._allgpu_split = True  # already split: CompileOverlap leaves it alone
    return compiled


def _with_options(compile_fx: Callable, options: dict) -> Callable:
    def compile_with_options(gm, example_inputs):
        return compile_fx(gm, example_inputs, config_patches=options)

    return compile_with_options


class _BucketCap:
    """What Dynamo reads from an active DDP module: the bucket size in bytes."""

    def __init__(self, bucket_bytes_cap: int):
        self.bucket_bytes_cap = bucket_bytes_cap


class CompileOverlap:
    """Global forward hooks that let Dynamo split a ``torch.compile(model)`` of ``sync``'s parameters.

    They act only on ``OptimizedModule`` wrappers whose first trainable parameter ``sync`` synchronises, run
    eagerly around the wrapper's call (Dynamo compiles the frame inside it), and return at once while tracing.
    """

    def __init__(self, sync: GradientSync):
        from torch.nn.modules import module as nn_module

        self.sync = sync
        self._previous: list = []
        # torch.compile(module) warns on every call while any global module hook exists, since such hooks fire
        # for the wrapper too; allgpu's are meant to (they return at once for anything but the wrapper).
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks",
                                category=UserWarning)
        # One global pre-hook; the wrapper it acts on gets its own post-hook, so other modules pay one call only.
        self._handles = [nn_module.register_module_forward_pre_hook(self._enter)]
        self._wrappers: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _applies(self, module: torch.nn.Module) -> bool:
        if torch.compiler.is_compiling() or not isinstance(module, torch._dynamo.eval_frame.OptimizedModule):
            return False  # is_compiling first: Dynamo folds it to a constant and traces nothing further
        if getattr(module, "_allgpu_split", False) or not self.sync.needed:
            return False
        first = next((p for p in module.parameters() if p.requires_grad), None)
        return first is not None and self.sync.synchronises(first)

    def _enter(self, module: torch.nn.Module, args) -> None:
        if self._applies(module):
            from torch.nn.parallel import DistributedDataParallel as DDP

            if module not in self._wrappers:
                self._wrappers.add(module)
                self._handles.append(module.register_forward_hook(self._leave, always_call=True))
            self._previous.append((module, DDP._active_ddp_module))
            # Dynamo's DDPOptimizer takes DDP's 1 MiB first bucket here and needs the cap to be at least that.
            DDP._active_ddp_module = _BucketCap(max(self.sync.bucket_cap_bytes, FIRST_BUCKET_BYTES))

    def _leave(self, module: torch.nn.Module, args, output) -> None:
        if torch.compiler.is_compiling():
            return
        if self._previous and self._previous[-1][0] is module:
            from torch.nn.parallel import DistributedDataParallel as DDP

            DDP._active_ddp_module = self._previous.pop()[1]
