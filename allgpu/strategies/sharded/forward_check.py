"""A forward of a sharded model is a collective: catch one run by some replicas only, at its first all-gather.

Under FSDP every unit's forward all-gathers its parameters from every replica. A forward run on some replicas
only (nanoGPT evaluates under ``if master_process:``; Keras-style ``if strategy.is_chief: model.evaluate(...)``)
pairs its all-gathers with whatever the other replicas do next, usually their own training forward: same shapes,
so nothing fails until later, far from the cause. So before each outermost forward of a sharded root module every
replica all-gathers a 16-byte tag (its line of user code, and whether gradients are on): one small collective per
forward, about 0.1 ms on Gloo loopback. Different tags stop every replica with a :class:`ShardedForwardError`
naming each replica's line; a replica that is elsewhere (in a barrier, a backward, or gone) makes the tag
collective fail, and that error gets the same guard and fix appended.
"""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist
from torch import nn

from allgpu.core.ledger import user_line
from allgpu.core.plain_pickle import pickle_plain
from allgpu.errors import CollectiveTimeoutError, ReplicaFailedError, ShardedForwardError

OP = "forward of the sharded model (all-gathers parameters)"
HINT = ("Under FullyShardedStrategy a forward is a collective: each unit all-gathers its parameters from every "
        "replica, so a forward run by some replicas only (evaluation under `if strategy.is_chief:` or "
        "`if master_process:`) cannot complete. Fix: run the evaluation on every replica, each on its share of the "
        "data, combine the metric with strategy.reduce('mean', loss), and print it on replica 0 only.")


class ForwardCheck:
    """Forward pre/post hooks on sharded roots that compare the replicas' forward call sites. ``group`` is the
    strategy's :class:`allgpu.core.replica_group.ReplicaGroup`."""

    def __init__(self, group):
        self.group = group
        self._depth = 0  # nested sharded roots: only the outermost forward is checked

    def watch(self, root: nn.Module) -> None:
        if self.group.world_size > 1:
            root.register_forward_pre_hook(self._before)
            root.register_forward_hook(self._after, always_call=True)
            pickle_plain(root)

    def _before(self, module, args) -> None:
        self._depth += 1
        if self._depth == 1:
            try:
                self.check(user_line())
            except BaseException:
                self._depth = 0
                raise

    def _after(self, module, args, output) -> None:
        self._depth = max(0, self._depth - 1)

    def check(self, where: str) -> None:
        """All-gather this replica's forward tag and compare. A collective."""
        grad = torch.is_grad_enabled()
        tag = torch.tensor([zlib.crc32(where.encode()), int(grad)], dtype=torch.int64, device=self.group.device)
        tags = [torch.empty_like(tag) for _ in range(self.group.world_size)]
        try:
            self.group.run_collective(OP, lambda: dist.all_gather(tags, tag), where)
        except (ReplicaFailedError, CollectiveTimeoutError) as exc:
            raise type(exc)(f"{exc} {HINT}") from exc
        if all(torch.equal(t, tags[0]) for t in tags):
            return
        try:
            lines = {rank: entry.where if entry else "?" for rank, entry in self.group.ledger.read_all().items()}
        except Exception:  # the store is unreadable: name this replica's line only
            lines = {self.group.rank: where}
        places = "; ".join(f"replica {rank} at {lines.get(rank, '?')} "
                           f"({'with gradients' if int(t[1]) else 'under torch.no_grad'})"
                           for rank, t in enumerate(tags))
        raise ShardedForwardError(f"the replicas ran forwards of the sharded model from different places: {places}. "
                                  + HINT)
