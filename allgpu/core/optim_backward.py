"""Optimizer-in-backward: step a bucket's parameters as soon as that bucket's all-reduce completes.

The ordinary step waits for every bucket, returns from ``backward()``, then walks all parameters again in
``optimizer.step()``. Here :class:`allgpu.core.sync.GradientSync` calls :class:`BucketStepper` for each bucket at the
end of backward, in bucket order, right after that bucket's all-reduce is waited for: bucket 0's update runs
while the later buckets' all-reduces are still in flight, and each update reads gradients that were just written
(still in cache). The idea is PyTorch's ``torch.distributed.optim._apply_optimizer_in_backward`` and DDP's
``_register_fused_optim``; this version keeps the user's one optimizer (its state, its param groups, an LR
scheduler attached to it) and steps it on a subset of parameters at a time.

Elementwise optimizers (SGD, momentum, Adam, AdamW, RMSprop, Adagrad, ...) give the same parameters as the
ordinary step, since each parameter's update depends only on its own gradient and state. Optimizers that look
at all parameters at once (LBFGS, gradient-norm clipping done between backward and step) cannot be split.
"""

from __future__ import annotations

import copy

import torch

from allgpu.errors import ArgumentError, ArgumentTypeError
NOT_SPLITTABLE = ("LBFGS", "SparseAdam")


class BucketStepper:
    """Steps ``optimizer`` on one bucket's parameters at a time; call it with a bucket's parameter list.

    Each bucket gets a shallow copy of ``optimizer`` that shares its ``state`` and whose param groups hold only
    that bucket's parameters; their hyperparameters (``lr``, ``betas``, ...) are refreshed from ``optimizer``'s
    groups before every step, so an LR scheduler stepping ``optimizer`` takes effect.

    Raises:
        ValueError: an optimizer that cannot be split per parameter (LBFGS), or one sharing no parameter with
            the synchronised model.
    """

    def __init__(self, optimizer: torch.optim.Optimizer):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ArgumentTypeError("optimizer_in_backward takes a torch.optim.Optimizer; got "
                                    f"{type(optimizer).__name__}.")
        if type(optimizer).__name__ in NOT_SPLITTABLE:
            raise ArgumentError(f"{type(optimizer).__name__} updates all parameters together and cannot step per "
                             "gradient bucket. Fix: use the ordinary optimizer.step() (optimizer_in_backward=False).")
        self.optimizer = optimizer
        self._group_of = {id(p): g for g, group in enumerate(optimizer.param_groups) for p in group["params"]}
        self._subs: dict[tuple[int, ...], tuple[torch.optim.Optimizer, list[int]]] = {}
        self.steps = 0

    def owns(self, param: torch.Tensor) -> bool:
        return id(param) in self._group_of

    def __call__(self, params: list[torch.Tensor]) -> None:
        params = [p for p in params if id(p) in self._group_of and p.grad is not None]
        if not params:
            return
        key = tuple(id(p) for p in params)
        if key not in self._subs:
            self._subs[key] = self._sub_optimizer(params)
        sub, groups = self._subs[key]
        for sub_group, g in zip(sub.param_groups, groups):
            sub_group.update({k: v for k, v in self.optimizer.param_groups[g].items() if k != "params"})
        sub.step()
        self.steps += 1

    def _sub_optimizer(self, params: list[torch.Tensor]) -> tuple[torch.optim.Optimizer, list[int]]:
        by_group: dict[int, list[torch.Tensor]] = {}
        for p in params:
            by_group.setdefault(self._group_of[id(p)], []).append(p)
        sub = copy.copy(self.optimizer)  # shares state (a dict keyed by parameter) and hooks
        groups = sorted(by_group)
        sub.param_groups = [{**{k: v for k, v in self.optimizer.param_groups[g].items() if k != "params"},
                             "params": by_group[g]} for g in groups]
        return sub, groups
