"""Gradient reduction for fully sharded modules: FSDP2's reduce-scatter, driven through GradientSync's interface.

:class:`allgpu.core.accumulate.Accumulation`, ``Strategy.no_sync`` and ``fit`` talk to a gradient synchroniser through
``enabled`` (reduce in this backward or not), ``divisor`` (what the summed gradients are divided by) and the
counters ``rounds`` / ``collectives`` / ``wait_s``. Here ``enabled`` maps to
``FSDPModule.set_requires_gradient_sync`` (FSDP2 then accumulates unsharded gradients locally, as DDP's
``no_sync``), ``divisor`` to ``FSDPModule.set_gradient_divide_factor``, and the counters are kept by the
reduce-scatter and all-gather callables installed with ``set_custom_reduce_scatter`` / ``set_custom_all_gather``,
which also enter each collective in the hang ledger. A script's own ``model.set_requires_gradient_sync(False)``
(FSDP2's ``no_sync``) is left as it set it; DDP's ``model.require_backward_grad_sync = False`` (nanoGPT's form,
kept by a script ported from DDP) is read at each forward of the sharded root and applied the same way.

On Gloo, ``set_force_sum_reduction_for_comms(True)`` is set: FSDP2 otherwise asks for ``ReduceOp.AVG`` or
NCCL's ``PREMUL_SUM`` (a custom divide factor), which Gloo lacks. FSDP2 would then reduce-scatter a SUM and divide
each replica's result by that replica's factor, so here the factor is 1 and the reduce-scatter callable divides
each replica's input by its own divisor before the SUM (``PREMUL_SUM``'s arithmetic): replicas weighting an
uneven batch by different divisors still sum to the global mean.
"""

from __future__ import annotations

import time
import weakref

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule

from allgpu.core.replica_group import ReplicaGroup

try:  # public in torch.distributed.fsdp._fully_shard since 2.7
    from torch.distributed.fsdp._fully_shard import AllGather, ReduceScatter
except ImportError:  # pragma: no cover - older layouts
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter


# The names FSDP2's own default comms use in this torch; the older ones elsewhere.
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
_ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)


class _Alloc:
    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)


class _CountedReduceScatter(_Alloc, ReduceScatter):
    def __init__(self, sync: "ShardedGradientSync"):
        self._sync = weakref.proxy(sync)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        self._sync._entered("reduce_scatter", input_tensor)
        if self._sync._premultiply != 1.0:  # Gloo: this replica's 1/divisor, applied before the SUM
            input_tensor.mul_(self._sync._premultiply)
        return self._sync._explained(lambda: _REDUCE_SCATTER(output_tensor, input_tensor, op=op, group=group,
                                                             async_op=async_op))


class _CountedAllGather(_Alloc, AllGather):
    def __init__(self, sync: "ShardedGradientSync"):
        self._sync = weakref.proxy(sync)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        self._sync._entered("all_gather", input_tensor)
        return self._sync._explained(lambda: _ALL_GATHER(output_tensor, input_tensor, group=group, async_op=async_op))


class ShardedGradientSync:
    """Drives FSDP2's gradient reduce-scatter for the fully sharded modules of one strategy.

    Attributes:
        rounds: backward passes whose gradients were reduce-scattered (one per optimizer step; ``k`` micro-batches
            under ``accumulate(k)`` count once).
        collectives: reduce-scatter calls issued (one per FSDP unit per round).
        all_gathers: parameter all-gathers issued (forward, and backward when ``reshard_after_forward``).
        wait_s: seconds the last round spent inside all-gather and reduce-scatter calls (its forward's too). Gloo
            runs them synchronously, so on CPU this is the communication time; NCCL calls return at launch, and
            FSDP2 waits for them inside its own hooks, so on CUDA it under-counts.
    """

    def __init__(self, group: ReplicaGroup):
        self.group = group
        self.rounds = 0
        self.collectives = 0
        self.all_gathers = 0
        self.wait_s = 0.0
        self._enabled = True
        self._divisor = float(group.world_size)
        self._weight = 1.0
        self._modules: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
        self._in_round = False
        self._comm_s = 0.0
        self._ledger = getattr(group, "ledger", None)
        self._gloo = group.device.type == "cpu"
        self._premultiply = 1.0

    @property
    def needed(self) -> bool:
        return True

    def attach(self, root: nn.Module) -> None:
        """Take charge of every FSDP unit under ``root`` (call once the whole model is sharded)."""
        gloo = self._gloo  # CPU tensors travel over Gloo
        reduce_scatter, all_gather = _CountedReduceScatter(self), _CountedAllGather(self)
        for module in root.modules():
            if isinstance(module, FSDPModule) and module not in self._modules:
                self._modules.add(module)
                if gloo:
                    module.set_force_sum_reduction_for_comms(True)
                module.set_custom_reduce_scatter(reduce_scatter)
                module.set_custom_all_gather(all_gather)
        root.register_forward_pre_hook(self._read_flag, prepend=True)
        self._apply(sync=True)

    def _read_flag(self, root: nn.Module, args) -> None:
        """DDP's ``require_backward_grad_sync`` on the root, once a script has set it: False holds this forward's
        backward to local accumulation (no reduce-scatter), as under ``no_sync``; True lets it reduce (unless
        ``no_sync``/``accumulate`` holds it). Never set: FSDP2's own switch stays as the script left it."""
        flag = root.__dict__.get("require_backward_grad_sync")
        if flag is None:
            return
        for module in root.modules():
            if isinstance(module, FSDPModule) and module in self._modules:
                module.set_requires_gradient_sync(self._enabled and bool(flag), recurse=False)

    def add(self, params) -> None:
        """Accepted for GradientSync compatibility; sharded parameters are reduced by FSDP2 itself."""

    @property
    def enabled(self) -> bool:
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._enabled = bool(value)
        self._apply(sync=True)

    @property
    def divisor(self) -> float:
        return self._divisor

    @divisor.setter
    def divisor(self, value: float) -> None:
        self._divisor = float(value)
        self._apply()

    @property
    def weight(self) -> float:
        """This replica's share of the global batch times N (see ``GradientSync.weight``)."""
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        if float(value) != self._weight:
            self._weight = float(value)
            self._apply()

    def _apply(self, *, sync: bool = False) -> None:
        # With a SUM forced (Gloo), FSDP2 divides each replica's reduced shard by that replica's own factor
        # afterwards, wrong when the divisors differ (an uneven last batch); so divide each input before the SUM.
        # ``sync``: also set FSDP2's gradient-sync switch (only when no_sync/accumulate changed it: a script's own
        # set_requires_gradient_sync(False) survives a divisor or weight change).
        divisor = self._divisor / self._weight if self._weight else float("inf")
        factor = 1.0 if self._gloo else divisor
        self._premultiply = 1.0 / divisor if self._gloo else 1.0
        for module in list(self._modules):
            if sync:
                module.set_requires_gradient_sync(self._enabled, recurse=False)
            module.set_gradient_divide_factor(factor)

    def _entered(self, op: str, tensor: torch.Tensor) -> None:
        if op == "all_gather":
            self.all_gathers += 1
        else:
            self.collectives += 1
            if not self._in_round:
                self._in_round = True
                torch.autograd.Variable._execution_engine.queue_callback(self._end_round)
        if self._ledger is not None and self.group.world_size > 1:
            self._ledger.enter(op, [list(tensor.shape)], None)

    def _explained(self, call):
        # Gloo runs these synchronously: a replica that never arrives surfaces here, and the ledger names it.
        start = time.monotonic()
        try:
            return call()
        except Exception as exc:  # backend errors are RuntimeError subclasses with transport-level text
            raise self.group.explain_failure(exc, time.monotonic() - start) from exc
        finally:
            self._comm_s += time.monotonic() - start

    def _end_round(self) -> None:
        self._in_round = False
        self.rounds += 1
        self.wait_s, self._comm_s = self._comm_s, 0.0
