"""``CentralStorageStrategy``: one copy of the parameters and optimizer state on a central device
(``tf.distribute.experimental.CentralStorageStrategy``), replicas on the compute devices.

Each replica computes on a working copy of the parameters on its own device; gradients are averaged across
replicas during backward (as under :class:`MirroredStrategy`). At ``optimizer.step()`` replica 0 swaps its
parameters for the central copies (CPU by default) and the averaged gradients for central copies of them, so the
optimizer updates the central copy and keeps its state (Adam's moments, momentum) there; the other replicas'
optimizers see no gradient and keep no state. After the step replica 0 copies the central parameters into its
working copy and broadcasts them: every replica refreshes. The compute devices then hold parameters and gradients
only, never optimizer state: memory per device falls, at the price of a host-side update and a broadcast a step.
A parameter changed in place between steps (``allgpu.checkpoint.restore``, an assignment under ``no_grad``), as
its version counter shows, is copied into the central copy before the next step.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from allgpu.devices import parse_device
from allgpu.core.mirror import mirror_tensors
from allgpu.strategies.mirrored import MirroredStrategy


class CentralStorageStrategy(MirroredStrategy):
    """Parameters and optimizer state kept once, on ``central_device``; compute on every replica's device.

    Args:
        devices / num_replicas / fallback / timeout / backend / bucket_cap_mb: as for :class:`MirroredStrategy`.
        central_device: where the one copy lives, ``"/cpu:0"`` by default (any accepted device name).

    The optimizer must be created inside ``scope()`` from the model's parameters, as usual; it is not wrapped.
    """

    _no_optimizer_in_backward = "its update runs on the central copy, swapped in around optimizer.step()."

    def __init__(self, devices=None, *, num_replicas: int | None = None, central_device="/cpu:0",
                 fallback: str = "one_device", timeout: float | None = None, backend: str | None = None,
                 bucket_cap_mb: float = 25.0):
        central = parse_device(central_device).torch_device()  # a bad name fails before any replica starts
        super().__init__(devices, num_replicas=num_replicas, fallback=fallback, timeout=timeout, backend=backend,
                         bucket_cap_mb=bucket_cap_mb)
        self.central_device = central
        self._central: dict[int, torch.Tensor] = {}  # id(param) -> central copy, on replica 0 only
        self._owned: set[int] = set()
        self._versions: dict[int, int] = {}  # id(param) -> its version counter when the central copy last matched
        self._swapped: list[tuple[torch.nn.Parameter, torch.Tensor, torch.Tensor | None]] = []
        self._hooks = [register_optimizer_step_pre_hook(self._before_step),
                       register_optimizer_step_post_hook(self._after_step)]

    def _mirror(self, params: list, buffers: list) -> None:
        super()._mirror(params, buffers)
        for p in params:
            if p.requires_grad and id(p) not in self._owned:
                self._owned.add(id(p))
                if self.is_chief:
                    self._central[id(p)] = p.detach().to(self.central_device, copy=True)
                self._versions[id(p)] = p._version

    def central_copy(self, param: torch.nn.Parameter) -> torch.Tensor | None:
        """The central copy of ``param`` (on replica 0; None elsewhere)."""
        return self._central.get(id(param))

    def _params_of(self, optimizer) -> list:
        return [p for group in optimizer.param_groups for p in group["params"] if id(p) in self._owned]

    def _before_step(self, optimizer, args, kwargs) -> None:
        for p in self._params_of(optimizer):
            if self.is_chief and p._version != self._versions[id(p)]:  # changed in place since the last step
                self._central[id(p)].copy_(p.detach())  # (checkpoint restore, an assignment): the copy follows
            working, grad = p.data, p.grad
            if self.is_chief:
                p.data = self._central[id(p)]
                p.grad = None if grad is None else grad.detach().to(self.central_device)
            else:
                p.grad = None  # the optimizer skips it: no update, no state on this replica
            self._swapped.append((p, working, grad))

    def _after_step(self, optimizer, args, kwargs) -> None:
        if not self._swapped:
            return
        swapped, self._swapped = self._swapped, []
        for p, working, grad in swapped:
            if self.is_chief:
                working.copy_(p.data)
            p.data, p.grad = working, grad
        with torch.no_grad():
            mirror_tensors([w for _, w, _ in swapped], self._group, where="CentralStorageStrategy refresh")
        for p, _, _ in swapped:
            self._versions[id(p)] = p._version

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        super().close()
