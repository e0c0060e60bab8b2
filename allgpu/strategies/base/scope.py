"""``strategy.scope()`` and ``strategy.mirror()``: which variables a strategy mirrors, and when.

Mixed into :class:`allgpu.strategies.base.strategy.Strategy`, whose constructor sets the state used here
(``_group``, ``_sync``, ``_check``, ``_mirrored_ids``, ``_scope_depth``, ``_record``). What a scope creates is
mirrored at its first use or at the outermost exit (:mod:`allgpu.core.scope_record`), so training inside the
``with`` block (TensorFlow's documented pattern) trains mirrored parameters. Strategies change what mirroring
means by overriding ``_mirror`` (CentralStorage, ParameterServer), ``_mirror_recorded`` and ``mirror``
(FullySharded: shard) and ``_mirror_keras``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from allgpu import keras as keras_support
from allgpu.errors import ArgumentTypeError, UnsupportedError
from allgpu.core import hf_save
from allgpu.core.assign_load import watch_assign
from allgpu.core.mirror import mark_mirrored, mirror_tensors
from allgpu.core.scope_record import ScopeRecord
from allgpu.strategies.base import context


class ScopeVariables:
    """``scope()``, ``mirror()`` and the mirroring hooks a strategy overrides."""

    @contextlib.contextmanager
    def scope(self) -> Iterator["ScopeVariables"]:
        """Modules and optimizers created inside are mirrored (``tf.distribute.Strategy.scope``). A collective.

        Their parameters are allocated on the replica's device, made identical on every replica (broadcast from
        replica 0) and their gradients averaged across replicas by the time ``loss.backward()`` returns.
        Mirroring happens at their first use: the first training forward pass, ``run``, ``fit``, a checkpoint or
        an optimizer step, whichever comes first, or else when the outermost scope exits
        (:mod:`allgpu.core.scope_record`); so training, evaluation and checkpoints work the same inside the
        ``with`` block as after it. Nested scopes and a second ``with strategy.scope():`` are allowed; what a
        scope creates after a first use is mirrored at its own first use.

        Keras models (PyTorch backend) constructed inside are adopted when their construction returns: their
        variables are mirrored when built, and their ``fit``/``evaluate`` train on every replica
        (:mod:`allgpu.keras`).
        """
        outermost = self._record is None
        if outermost:
            self._record = ScopeRecord(self._mirror_recorded, self._first_use)
        record = self._record
        self._scope_depth += 1
        mirror_at_exit = False
        keras_models = keras_support.ModelRecorder(self._adopt_keras)
        keras_metrics = keras_support.ModelRecorder(self._sync_keras_metrics, kind="Metric")
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.device(self.device))
                stack.enter_context(context.entered(self, replica=False))  # get_strategy(), cross-replica context
                if outermost:
                    stack.enter_context(record)
                    stack.enter_context(keras_models)
                    stack.enter_context(keras_metrics)
                yield self
            mirror_at_exit = outermost
        finally:
            self._scope_depth -= 1
            if outermost:
                self._record = None
                try:
                    if mirror_at_exit:  # the body finished on this replica, so on the others: mirror together
                        record.mirror_now()
                        keras_support.adopt(self, keras_models.models)  # what Keras built since, now mirrored
                finally:
                    record.close()

    def _adopt_keras(self, models: list) -> None:
        """Adopt the Keras models whose construction just returned inside ``scope()`` (a collective when built)."""
        record = self._record
        with record.paused() if record is not None else contextlib.nullcontext():
            keras_support.adopt(self, models)

    def _sync_keras_metrics(self, metrics: list) -> None:
        """A Keras metric constructed inside ``scope()`` reads its state across replicas (sync-on-read)."""
        from allgpu.keras.metrics import sync_on_read

        sync_on_read(self, metrics[-1:])  # the outermost: metrics it made inside are read through it

    def _first_use(self, module: torch.nn.Module, args: tuple, kwargs: dict):
        """Forward pre-hook on what an open scope created: mirror at the first training forward, then check."""
        record = self._record
        if record is None:
            return None
        result = record.first_use(module, args, kwargs)
        if result is not None and self._check is not None:
            self._check.check(module)
        return result

    def _mirror_pending(self) -> None:
        """Mirror what the open ``scope()`` created and has not mirrored yet (a collective when there is any).
        ``run``, ``fit``, ``evaluate``, checkpoints and ``compile`` call it first, as their first use."""
        if self._record is not None:
            self._record.mirror_now()

    def _mirror_recorded(self, params: list, buffers: list, roots: list, late: bool) -> None:
        """Mirror what a scope recorded (see :class:`~allgpu.core.scope_record.ScopeRecord`). With ``late`` (an
        optimizer step was the first use) the gradients already computed are averaged too."""
        fresh = [p for p in params if id(p) not in self._mirrored_ids]
        self._mirror(params, buffers)
        self._watch_assign([r for r in roots if isinstance(r, torch.nn.Module)])
        grads = [p.grad for p in fresh if p.grad is not None]
        if late and grads and self.num_replicas_in_sync > 1:
            flat = torch.cat([g.reshape(-1) for g in grads])
            self._group.all_reduce(flat, "mean", where="first optimizer step inside strategy.scope()")
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    def mirror(self, module: torch.nn.Module) -> torch.nn.Module:
        """Mirror a module built outside ``scope()`` (loaded from disk, say): move, broadcast, sync. Returns it.

        A Keras model (PyTorch backend) is mirrored as if built in ``scope()``: its variables now and when it is
        built later, and its ``fit``/``evaluate`` train on every replica. A collective.
        """
        if keras_support.is_keras_model(module):
            keras_support.adopt(self, [module])
            return module
        if not isinstance(module, torch.nn.Module):
            raise ArgumentTypeError(f"mirror() takes a torch.nn.Module; got {type(module).__name__}.")
        self._mirror(list(module.parameters()), list(module.buffers()))
        self._watch_assign([module])
        return module

    def _watch_assign(self, roots: list) -> None:
        """``load_state_dict(assign=True)`` on these roots keeps their mirrored parameters
        (:mod:`allgpu.core.assign_load`)."""
        roots = [r for r in roots if not keras_support.is_keras_model(r)]
        watch_flag = getattr(self._sync, "watch_flag", None)  # DDP's require_backward_grad_sync (GradientSync only)
        if watch_flag is not None:
            watch_flag(roots)
        for root in roots:
            if watch_flag is not None:
                self._offer_no_sync(root)
                hf_save.offer(root, self._writer)  # a Hugging Face model's save_pretrained on every replica
            watch_assign(root, keep=lambda p: id(p) in self._mirrored_ids, adopt=lambda new: None)

    def _offer_no_sync(self, root: torch.nn.Module) -> None:
        """DDP's and FSDP1's ``with model.no_sync():``, kept by a ported script (timm tests ``hasattr`` first): the
        root gets the strategy's :meth:`no_sync` unless it has one (dropped when pickled: allgpu.core.plain_pickle),
        and DDP's ``join`` / ``join_hook``, which raise :class:`UnsupportedError` naming the fix."""
        if not hasattr(root, "no_sync"):
            root.__dict__["no_sync"] = self.no_sync
        for name in ("join", "join_hook"):  # DDP's `with model.join():`, the generic `Join([model])`'s first call
            if not hasattr(root, name):
                root.__dict__[name] = self._refuse_join

    def _refuse_join(self, *args, **kwargs):
        """DDP's ``model.join()`` and ``Join([model, ...])`` (pytorch/tutorials' generic_join): were a bare
        ``AttributeError: 'Linear' object has no attribute 'join_hook'``."""
        raise UnsupportedError(
            "Join([model]) / model.join() (uneven inputs: replicas running different numbers of steps) is not "
            "supported on a model mirrored by allgpu: its gradient all-reduce has no join hook to stand in for a "
            "replica that ran out of batches. Fix: give every replica the same number of steps: "
            "strategy.distribute_dataset(data, global_batch_size=B, drop_remainder=False) splits the last short "
            "batch into near-equal shares (a replica with zero rows still joins the all-reduce), as does a "
            "DataLoader over a DistributedSampler (it pads); or stop all replicas at the shortest count, "
            "int(strategy.reduce('min', torch.tensor(len(batches)))), and drop the Join.")

    def _mirror(self, params: list, buffers: list) -> None:
        params = [p for p in params if id(p) not in self._mirrored_ids]
        if not params and not buffers:
            return
        mirror_tensors(params + buffers, self._group)
        self._mirrored_ids.update(id(p) for p in params)
        self._sync.add(params)
        self._sync.add_buffers(buffers)
        mark_mirrored(params)  # for any strategy's check, this one's or another's still alive in the process

    def _mirror_keras(self, model, values: list, optimizer_values: list) -> None:
        """Mirror a Keras model's built variables (called by :class:`allgpu.keras.replica.KerasReplica`)."""
        self._mirror(values, optimizer_values)
