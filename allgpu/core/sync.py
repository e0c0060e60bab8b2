"""Gradient synchronisation: buckets, asynchronous all-reduce overlapped with the backward pass, no-sync.

Follows the design of PyTorch DDP's reducer (Li et al., "PyTorch Distributed: Experiences on Accelerating Data
Parallel Training", VLDB 2020): parameters are grouped into buckets of about ``bucket_cap_mb`` MiB in reverse
registration order (roughly the order gradients become ready); a post-accumulate-grad hook marks each parameter
ready, and a bucket whose parameters are all ready is all-reduced asynchronously while the backward pass goes
on. Buckets are launched strictly in index order so every replica issues the same collectives in the same
order. An autograd engine callback at the end of backward launches what remains, waits, and leaves each
``param.grad`` as a view of its averaged bucket (no copy back).

Unused parameters, as DDP: a parameter unused on some replica contributes zeros there; one unused on *every*
replica keeps ``grad is None`` (an optimizer then skips it, as on one device). Each bucket carries one extra
element per parameter counting the replicas that used it, so finding out costs no extra collective.
Buffers (BatchNorm running statistics), as DDP's ``broadcast_buffers=True``: replica 0's are broadcast to the
others at the end of every backward that synchronises, so replicas never drift and checkpoints hold what
every replica holds.
"""

from __future__ import annotations

import time
import weakref
from typing import Iterable

import torch
import torch.distributed as dist

from allgpu.errors import ArgumentError
from allgpu.core.replica_group import ReplicaGroup


FIRST_BUCKET_BYTES = 1024 * 1024
RECORD_ROUNDS_MIN_NUMEL = 1_000_000  # gradient elements from which a round's ledger entry costs no measurable time
COMPRESSIONS = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}


def assign_buckets(params: list[torch.nn.Parameter], bucket_cap_bytes: int) -> list[list[torch.nn.Parameter]]:
    """Group ``params`` into gradient buckets as DDP's ``_compute_bucket_assignment_by_size`` does: in reverse
    order (roughly the order backward produces gradients), a bucket closing once it reaches its cap, the first cap
    ``FIRST_BUCKET_BYTES`` (1 MiB, so communication starts early in the backward), then ``bucket_cap_bytes``; a
    change of dtype or device starts a new bucket. Returns the buckets, each a list of parameters."""
    buckets: list[list[torch.nn.Parameter]] = []
    current: list[torch.nn.Parameter] = []
    size = 0
    for p in reversed(params):
        if current and (p.dtype != current[0].dtype or p.device != current[0].device):
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= (min(FIRST_BUCKET_BYTES, bucket_cap_bytes) if not buckets else bucket_cap_bytes):
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


class _Bucket:
    def __init__(self, params: list[torch.nn.Parameter]):
        self.params = params
        self.numel = sum(p.numel() for p in params)
        # One trailing element per parameter: how many replicas used it this round (summed by the all-reduce).
        self.buffer = torch.zeros(self.numel + len(params), dtype=params[0].dtype, device=params[0].device)
        self.used = self.buffer[self.numel:]
        self.views, offset = [], 0
        for p in params:
            self.views.append(self.buffer[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        self.ready = 0
        self.work = None
        self.wire: torch.Tensor | None = None  # the compressed copy in flight, when compressing


class GradientSync:
    """Averages gradients of registered parameters across the replicas of ``group``.

    Args:
        group: the replicas; with a world of one and no accumulation, the hooks return at once.
        bucket_cap_mb: bucket size in MiB (DDP's default is 25).
        compression: None, ``"bf16"`` or ``"fp16"``: all-reduce float32 buckets in half the bytes and cast the
            average back (DDP's ``bf16_compress_hook`` / ``fp16_compress_hook``). Replicas stay identical;
            the average carries the 16-bit format's rounding (about 3 significant digits for bf16).

    Attributes:
        rounds: backward passes whose gradients were all-reduced (one per optimizer step, k micro-batches
            under accumulation count once).
        collectives: all-reduce calls issued (buckets), for tests and the step monitor.
        wait_s: seconds the last round spent waiting for all-reduces beyond what overlapped the backward.
        weight: this replica's share of the global batch times N (1.0 for an even split; set for each batch by
            :class:`allgpu.core.data.DistributedDataset`, so an uneven last batch averages as on one replica).
        record_rounds: enter each backward round in the collective ledger (one entry per round, made once its
            all-reduces are launched), so a replica missing from a gradient all-reduce is named with its round
            and the line of ``loss.backward()``. Only for models of at least ``RECORD_ROUNDS_MIN_NUMEL``
            gradient elements (the same decision on every replica, so ledger sequence numbers stay aligned): the
            entry is a store round trip per step, about 0.2-0.4 ms on loopback, under noise at a 12 ms step of a
            1.07M-parameter MLP but 10-20% of a 1.5 ms step of a 4.4K-parameter one (``benchmarks/ledger_rounds.py``).
            Below it the launcher's line names a missing replica.
    """

    record_rounds = True

    def __init__(self, group: ReplicaGroup, bucket_cap_mb: float = 25.0, compression: str | None = None):
        if compression not in COMPRESSIONS:
            raise ArgumentError(f"gradient_compression={compression!r}; expected one of {tuple(COMPRESSIONS)}.")
        self.group = group
        self.wire_dtype = COMPRESSIONS[compression]
        self.bucket_cap_bytes = int(bucket_cap_mb * 1024 * 1024)
        self.params: list[torch.nn.Parameter] = []
        self._known: set[int] = set()
        self.buckets: list[_Bucket] = []
        self._numel = 0
        self._recorded = False  # this round is in the ledger
        self._bucket_of: dict[int, tuple[int, int]] = {}
        self._trainable: list[bool] = []  # requires_grad of each of self.params when the buckets were built
        self._stale = False  # a parameter's dtype no longer matches its bucket's
        self.enabled = True
        self.broadcast_buffers = True
        self.buffers: list[torch.Tensor] = []
        self._fired: set[int] = set()  # parameters whose gradient was produced since the last round
        self.divisor = float(group.world_size)
        self.weight = 1.0  # this replica's share of the global batch times N, set per batch by the dataset
        self.rounds = 0
        self.collectives = 0
        self.wait_s = 0.0
        self._active = False
        self._next = 0
        self.stepper = None  # optimizer-in-backward: called with each bucket's parameters once it is averaged
        self._flag_roots: list[weakref.ref] = []  # modules whose require_backward_grad_sync is honoured

    @property
    def needed(self) -> bool:
        return self.group.world_size > 1 or self.divisor != 1.0 or self.stepper is not None

    def synchronises(self, param: torch.Tensor) -> bool:
        """True when ``param``'s gradient is averaged by this synchroniser."""
        return id(param) in self._known

    def add(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Register parameters (already identical on every replica); rebuilds the buckets.

        A frozen floating-point parameter is registered too (its hook set while ``requires_grad`` is briefly
        True): fine-tuning that unfreezes a backbone after some epochs (``requires_grad_(True)``) must average
        its gradients from then on; before, they stayed each replica's own and the replicas drifted apart
        silently. Buckets hold the parameters that require gradients at the backward's start."""
        new = [p for p in params if id(p) not in self._known and (p.requires_grad or p.is_floating_point())]
        for p in new:
            self._known.add(id(p))
            self.params.append(p)
            frozen = not p.requires_grad
            if frozen:
                p.requires_grad_(True)
            try:
                p.register_post_accumulate_grad_hook(self._on_grad_ready)
            finally:
                if frozen:
                    p.requires_grad_(False)
        if new:
            self._rebuild()

    def watch_flag(self, modules: Iterable[torch.nn.Module]) -> None:
        """Honour DDP's ``module.require_backward_grad_sync = False`` on these mirrored models (nanoGPT's form of
        ``no_sync()``, which a script ported from DDP keeps): while any of them holds False, backward passes
        accumulate locally as under :meth:`allgpu.Strategy.no_sync`. Read when a backward starts (DDP reads it at
        the forward; scripts set it before both). Through ``torch.compile`` too (its wrapper sets the attribute
        on the module it compiles)."""
        known = {id(r()) for r in self._flag_roots}
        self._flag_roots.extend(weakref.ref(m) for m in modules if id(m) not in known)

    def _held_by_flag(self) -> bool:
        return any(m is not None and not m.__dict__.get("require_backward_grad_sync", True)
                   for m in (r() for r in self._flag_roots))

    def add_buffers(self, buffers: Iterable[torch.Tensor]) -> None:
        """Register buffers to broadcast from replica 0 after each synchronising backward."""
        known = {id(b) for b in self.buffers}
        self.buffers.extend(b for b in buffers if id(b) not in known and not known.add(id(b)))

    def _rebuild(self) -> None:
        self._trainable = [p.requires_grad for p in self.params]
        self._stale = False
        trainable = [p for p in self.params if p.requires_grad]
        self.buckets = [_Bucket(params) for params in assign_buckets(trainable, self.bucket_cap_bytes)]
        self._bucket_of = {}
        for b, bucket in enumerate(self.buckets):
            for i, p in enumerate(bucket.params):
                self._bucket_of[id(p)] = (b, i)
        self._numel = sum(bucket.numel for bucket in self.buckets)

    def _layout_changed(self) -> bool:
        """Parameters frozen or unfrozen, or converted (``model.to(torch.bfloat16)``, ``model.double()`` after
        mirroring: a float32 bucket would hand them float32 gradients, which torch refuses), since the buckets were
        built. Conversions are seen at each bucket's first parameter, and at any other in :meth:`_launch`."""
        return (self._stale or [p.requires_grad for p in self.params] != self._trainable
                or any(b.params[0].dtype != b.buffer.dtype or b.params[0].device != b.buffer.device
                       for b in self.buckets))

    # -- during backward ---------------------------------------------------------------------------------------
    def _on_grad_ready(self, param: torch.nn.Parameter) -> None:
        if not self.needed:
            return
        self._fired.add(id(param))  # also under no_sync: accumulated micro-batches count as use
        if not self.enabled:
            return
        if not self._active:
            if self._flag_roots and self._held_by_flag():
                return
            self._active = True
            self._next = 0
            if self._layout_changed():
                self._rebuild()
            for bucket in self.buckets:
                bucket.ready = 0
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
        b, _ = self._bucket_of[id(param)]
        self.buckets[b].ready += 1
        while self._next < len(self.buckets) and self.buckets[self._next].ready == len(self.buckets[self._next].params):
            self._launch(self.buckets[self._next])
            self._next += 1

    def _launch(self, bucket: _Bucket) -> None:
        divisor = self.divisor / self.weight if self.weight else self.divisor
        for i, (p, view) in enumerate(zip(bucket.params, bucket.views)):
            grad = p.grad
            used = id(p) in self._fired and grad is not None
            if used and grad.dtype != view.dtype:  # converted alone after mirroring: averaged in the bucket's dtype
                self._stale = True  # this round; rebuilt at the next
            if not used or not self.weight:  # weight 0: a replica with no example of a short last batch
                view.zero_()
            elif grad.data_ptr() != view.data_ptr():
                # Divide while copying in (one pass over the gradient, as DDP's reducer does with mul_out).
                torch.div(grad, divisor, out=view)
            else:
                view.div_(divisor)
            bucket.used[i] = 1.0 if used else 0.0  # summed: how many replicas used it
        if self.group.world_size > 1:
            wire = bucket.buffer
            if self.wire_dtype is not None and wire.dtype == torch.float32:
                wire = bucket.wire = wire.to(self.wire_dtype)
            bucket.work = dist.all_reduce(wire, async_op=True)
            self.collectives += 1

    def _finalize(self) -> None:
        start = time.perf_counter()
        try:
            while self._next < len(self.buckets):
                self._launch(self.buckets[self._next])
                self._next += 1
            self._recorded = (self.record_rounds and self.group.world_size > 1
                              and self._numel >= RECORD_ROUNDS_MIN_NUMEL)
            if self._recorded:  # one entry per round, written while the launched all-reduces run (overlapping)
                self.group.ledger.enter(f"gradient all-reduce of backward round {self.rounds + 1}",
                                        [[b.numel] for b in self.buckets])
            for bucket in self.buckets:
                if bucket.work is not None:
                    self.group.wait(bucket.work, None if self._recorded else
                                    f"the gradient all-reduce of backward round {self.rounds + 1}")
                    bucket.work = None
                if bucket.wire is not None:
                    bucket.buffer.copy_(bucket.wire)
                    bucket.wire = None
                # Read the counts (a device-to-host copy) only when this replica left a parameter unused: when it
                # used them all, every count is >= 1 and there is nothing to decide.
                all_here = all(id(p) in self._fired for p in bucket.params)
                used = [1.0] * len(bucket.params) if all_here else bucket.used.tolist()
                for p, view, count in zip(bucket.params, bucket.views, used):
                    if count > 0.5:  # unused on every replica: its grad is left as it was (None), as on one device
                        p.grad = view if view.dtype == p.dtype else view.to(p.dtype)
                if self.stepper is not None:  # while the later buckets' all-reduces are still in flight
                    self.stepper(bucket.params)
            self._broadcast_buffers()
        finally:
            self._active = False
            self._fired.clear()
        self.rounds += 1
        self.wait_s = time.perf_counter() - start

    def _broadcast_buffers(self) -> None:
        if not (self.broadcast_buffers and self.buffers and self.group.world_size > 1):
            return
        from allgpu.core.mirror import mirror_tensors

        mirror_tensors(self.buffers, self.group, where="buffer broadcast after backward")
