"""Differentiable all-reduce and all-gather between replicas: ``ReplicaContext.all_reduce`` / ``all_gather``.

Gradients follow ``tf.distribute.ReplicaContext``: the gradient of an all-sum is the all-sum of the incoming
gradients (all-mean likewise), and the gradient of an all-gather is this replica's slice of the all-summed incoming
gradient. With allgpu's convention (each replica's loss is a mean over its own examples and parameter gradients are
*averaged* across replicas) this gives the gradient of the global-batch loss, as TensorFlow's convention (losses
divided by the global batch, gradients summed) does: N replicas at global batch B train as one replica at B.
Every forward and backward here is a collective: every replica must call it, in the same order.
"""

from __future__ import annotations

import torch

from allgpu.core.replica_group import ReplicaGroup


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group: ReplicaGroup, op: str) -> torch.Tensor:
        out = group.all_reduce(tensor.detach().clone(), op, where=f"ReplicaContext.all_reduce({op!r})")
        ctx.group, ctx.op = group, op
        if op in ("max", "min"):
            ctx.save_for_backward(tensor.detach() == out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        op = "mean" if ctx.op == "mean" else "sum"
        total = ctx.group.all_reduce(grad.detach().clone(), op, where=f"backward of ReplicaContext.all_reduce")
        if ctx.op in ("max", "min"):  # the gradient goes where this replica holds the extreme (ties: to each)
            (won,) = ctx.saved_tensors
            total = total * won
        return total, None, None


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group: ReplicaGroup, axis: int) -> torch.Tensor:
        size = torch.tensor([tensor.shape[axis]], device=tensor.device)
        sizes = [int(s) for s in group.all_gather(size, where="ReplicaContext.all_gather (sizes)")]
        biggest = max(sizes)
        padded = tensor.detach()
        if padded.shape[axis] < biggest:
            pad_shape = list(padded.shape)
            pad_shape[axis] = biggest - padded.shape[axis]
            padded = torch.cat([padded, padded.new_zeros(pad_shape)], dim=axis)
        parts = group.all_gather(padded.contiguous(), where="ReplicaContext.all_gather")
        ctx.group, ctx.axis, ctx.sizes = group, axis, sizes
        return torch.cat([p.narrow(axis, 0, s) for p, s in zip(parts, sizes)], dim=axis)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        total = ctx.group.all_reduce(grad.detach().contiguous().clone(), "sum",
                                     where="backward of ReplicaContext.all_gather")
        start = sum(ctx.sizes[:ctx.group.rank])
        return total.narrow(ctx.axis, start, ctx.sizes[ctx.group.rank]), None, None


def all_reduce(group: ReplicaGroup, tensor: torch.Tensor, op: str) -> torch.Tensor:
    """``tensor`` (any shape, same on every replica) combined with ``op`` (``"sum" | "mean" | "max" | "min"``)
    across the replicas of ``group``; same shape, differentiable. A collective (its backward too)."""
    if group.world_size == 1:
        return tensor
    if op == "mean" and not tensor.is_floating_point():
        tensor = tensor.double()
    return _AllReduce.apply(tensor, group, op)


def all_gather(group: ReplicaGroup, tensor: torch.Tensor, axis: int) -> torch.Tensor:
    """Every replica's ``tensor`` concatenated along ``axis`` in replica order: shape ``(sum of sizes, ...)`` along
    ``axis``, the other dimensions as on every replica (sizes along ``axis`` may differ). Differentiable. A
    collective of two all-gathers (sizes, values); its backward is one all-reduce."""
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    if group.world_size == 1:
        return tensor
    return _AllGather.apply(tensor, group, axis % tensor.dim())
