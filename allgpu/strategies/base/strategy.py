"""The ``Strategy`` base: the public API, validated once here, on top of a :class:`ReplicaGroup`.

Vocabulary follows ``tf.distribute.Strategy``: a *replica* is one process bound to one device;
``num_replicas_in_sync`` is the number of replicas (the world size); ``replica_id_in_sync`` is this replica's
rank. There is no cross-replica context to enter: every replica runs the whole program (SPMD), as under DDP.

**Collectives.** A method documented as a *collective* must be called by every replica, in the same order
relative to the other collectives (gradient sync in ``backward()`` included); a replica that skips one leaves the
others waiting until ``timeout``, and the error then names it. Methods not so marked are local to the replica.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_map
from torch.utils.data import DataLoader

from allgpu.errors import ArgumentError, ArgumentTypeError
from allgpu.runtime import live
from allgpu.runtime.process_group import release_solo_group
from allgpu.core.accumulate import Accumulation
from allgpu.core.dist_iterator import every_replica_has_one
from allgpu.keras.tf_data import distributed as tf_input, is_tf_dataset, limit_if_imported
from allgpu.keras.metrics import local_reads
from allgpu.core.compiling import CompileOverlap, compile_model
from allgpu.core.data import DistributedDataset, EpochCounter, InputContext, PerReplicaInput, batched_loader_settings
from allgpu.core.mirror import MirrorCheck
from allgpu.core.one_program import OneProgram
from allgpu.core.one_writer import OneWriter
from allgpu.core.replica_group import ReplicaGroup
from allgpu.strategies.base import context
from allgpu.strategies.base.replica_context import ReplicaContext
from allgpu.strategies.base.checks import as_tensor, is_nest, op_name, validate_sync_options
from allgpu.strategies.base.full_state import full_state, install_torch_save
from allgpu.core.scope_record import ScopeRecord
from allgpu.strategies.base.scope import ScopeVariables
from allgpu.strategies.base.pickling import NotPickled
from allgpu.strategies.base.tf_names import TFNames
from allgpu.core.sync import GradientSync


class Strategy(ScopeVariables, TFNames, NotPickled):
    """Where parameters live and how they are kept in sync.

    Subclass constructors validate their own arguments, obtain a :class:`~allgpu.runtime.placement.Placement`
    from :mod:`allgpu.runtime` (which starts or joins the job) and pass it here with whether unmirrored
    parameters are errors; they never start processes themselves.
    """

    _no_optimizer_in_backward: str | None = None  # why a strategy cannot step inside backward

    def __init__(self, placement, *, check_mirrored: bool, bucket_cap_mb: float = 25.0,
                 gradient_compression: str | None = None):
        validate_sync_options(bucket_cap_mb, gradient_compression)
        self.placement = placement
        group = ReplicaGroup.from_placement(placement)
        self._group = group
        self._sync = GradientSync(group, bucket_cap_mb=bucket_cap_mb, compression=gradient_compression)
        self._check = MirrorCheck(group.world_size, group.rank) if check_mirrored else None
        self._overlap = CompileOverlap(self._sync)  # a user's torch.compile(model) keeps all-reduce overlapping
        self._mirrored_ids: set[int] = set()
        self._accumulations: dict[int, Accumulation] = {}
        self._scope_depth = 0
        self._record: ScopeRecord | None = None  # what the open scope() created, until mirrored
        self._data_epochs = EpochCounter()
        self._writer = OneWriter(group)  # files written once, by replica 0 (model.save, torch.save of full state)
        if group.world_size > 1:
            install_torch_save()  # torch.save(strategy.full_state_dict(model), path) on every replica writes once
        self._one_program = OneProgram(group).share()  # every replica continues from replica 0's random state
        live.register(self)
        limit_if_imported(group.local_world_size)  # TensorFlow, if imported, keeps to this replica's cores

    # -- who and where -----------------------------------------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas in the job (world size)."""
        return self._group.world_size

    @property
    def replica_id_in_sync(self) -> int:
        """This replica's index, ``0 <= id < num_replicas_in_sync`` (rank)."""
        return self._group.rank

    @property
    def device(self) -> torch.device:
        """This replica's device."""
        return self._group.device

    @property
    def is_chief(self) -> bool:
        """True on replica 0, the one that logs, prints progress and writes checkpoints."""
        return self._group.rank == 0

    @property
    def gradient_sync(self) -> GradientSync:
        """The gradient synchroniser (counters ``rounds``, ``collectives``, ``wait_s``)."""
        return self._sync

    @property
    def broadcast_buffers(self) -> bool:
        """True (default, as DDP): after each synchronising backward, replica 0's buffers (BatchNorm running
        statistics) overwrite the other replicas', one broadcast per dtype. False: each replica keeps its own."""
        return self._sync.broadcast_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value: bool) -> None:
        self._sync.broadcast_buffers = bool(value)

    def convert_sync_batchnorm(self, module: torch.nn.Module) -> torch.nn.Module:
        """Replace every ``BatchNorm*d`` in ``module`` by ``torch.nn.SyncBatchNorm`` (statistics over the global
        batch); call it before ``scope()`` exits or before ``mirror``. Returns the converted module.

        Raises:
            UnsupportedError: CPU replicas: PyTorch's SyncBatchNorm runs on GPUs only; buffers are then kept
                identical by the per-step broadcast from replica 0 (``broadcast_buffers``).
        """
        if self.num_replicas_in_sync > 1 and self.device.type == "cpu":
            from allgpu.errors import UnsupportedError

            raise UnsupportedError(
                "torch.nn.SyncBatchNorm runs on GPUs only, and these replicas are on CPU. Without it each replica "
                "normalises over its own batch and replica 0's running statistics are broadcast after every step "
                "(broadcast_buffers=True), as DDP does. Fix: keep BatchNorm as it is on CPU, or use GPU replicas.")
        return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)

    @property
    def replica_group(self) -> ReplicaGroup:
        """The job's collectives (:class:`allgpu.core.replica_group.ReplicaGroup`)."""
        return self._group

    @property
    def fallback_reason(self) -> str | None:
        """Why a multi-device start fell back to one device (``fallback="one_device"``), else None."""
        return self.placement.fallback_reason

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(replica {self.replica_id_in_sync} of {self.num_replicas_in_sync}, "
                f"device={self.device})")

    def full_state_dict(self, model: torch.nn.Module) -> dict:
        """``model``'s complete state dict (name -> CPU tensor copy) on every replica; local (``FullyShardedStrategy``:
        on replica 0, a collective). ``torch.save(strategy.full_state_dict(model), path)`` may run on every replica:
        replica 0 writes, the others return once the file is complete (:mod:`allgpu.strategies.base.full_state`).
        Raises TypeError for anything but a ``torch.nn.Module``."""
        if not isinstance(model, torch.nn.Module):
            raise ArgumentTypeError(f"full_state_dict(model) takes a torch.nn.Module; got {type(model).__name__}.")
        return full_state({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}, self._writer)

    def compile(self, model: torch.nn.Module, *, backend="inductor", **compile_kwargs) -> torch.nn.Module:
        """``torch.compile(model)`` with the graph split at this strategy's gradient-bucket boundaries.

        Gradient all-reduce then overlaps the compiled backward, as under DDP (Dynamo's ``DDPOptimizer``; see
        :mod:`allgpu.core.compiling`). A plain ``torch.compile(model)`` trains the same parameters, but its backward is
        one graph and every all-reduce waits for its end. ``compile_kwargs`` are ``torch.compile``'s. Local.
        Returns the compiled module (it shares ``model``'s parameters).
        """
        self._mirror_pending()  # the graph is split at gradient-bucket boundaries: the buckets must exist
        return compile_model(model, self._sync, backend=backend, **compile_kwargs)

    # -- computation -------------------------------------------------------------------------------------------
    def run(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Run ``fn(*args, **kwargs)`` on this replica and return its result (``tf.distribute.Strategy.run``).

        Local: ``run`` itself communicates nothing. Every replica calls it with its own per-replica values, and
        collectives inside ``fn`` (gradient sync, ``reduce``) meet the other replicas' calls.

        Loss convention: gradients are *averaged* across replicas (DDP's convention), where ``tf.distribute``
        sums them. Inside ``fn`` compute the loss as the mean over this replica's examples (``reduction="mean"``,
        the default of torch losses); with TensorFlow's spelling, sum over examples divided by the global batch,
        use :func:`allgpu.compute_average_loss` (a hand-written ``loss.sum() / GLOBAL_BATCH`` would divide the
        learning rate by ``num_replicas_in_sync``).
        """
        if not callable(fn):
            raise ArgumentTypeError(f"strategy.run(fn, ...) needs a callable fn; got {type(fn).__name__}.")
        if not isinstance(args, (tuple, list)):
            raise ArgumentTypeError(f"strategy.run(fn, args=...) takes a tuple of arguments; got {type(args).__name__}. "
                            "Fix: args=(batch,) with a trailing comma.")
        self._mirror_pending()  # a first use of what an open scope() created
        with local_reads(), self._in_replica_context():  # get_replica_context() inside fn; a Keras
            return fn(*args, **(kwargs or {}))  # metric's result() is this replica's (sync-on-read)

    def _in_replica_context(self):
        """A ``with`` block in this strategy's replica context (``allgpu.get_replica_context()`` answers inside):
        ``run``, ``fit``'s steps and a Keras model's ``train_step``/``test_step`` enter it, as TensorFlow runs them."""
        return context.entered(self, replica=True)

    def replica_context(self) -> ReplicaContext:
        """This replica's :class:`~allgpu.strategies.base.replica_context.ReplicaContext` (what
        ``allgpu.get_replica_context()`` returns inside ``run``): ``all_reduce`` and ``all_gather`` across the
        replicas, differentiable. Local; its collectives are collectives."""
        return ReplicaContext(self, self._group)

    def reduce(self, op: str, value: Any, axis: int | None = None) -> torch.Tensor:
        """Combine ``value`` across replicas (``tf.distribute.Strategy.reduce``).

        Args:
            op: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"`` (``tf.distribute.ReduceOp.SUM`` etc. also accepted).
            value: a tensor or number, same shape on every replica; or a dict, or a list/tuple holding
                tensors (``tf.distribute``'s nests), reduced tensor by tensor into the same structure.
            axis: also reduce along this axis of each replica's value; ``"mean"`` then averages over all
                elements of all replicas (correct when replicas hold different counts).

        Returns:
            The reduced tensor on this replica's device, identical on every replica. A collective.

        Raises:
            ValueError: unknown ``op``. ArgumentTypeError: a value that is no tensor or number.
            CollectiveTimeoutError: a replica did not arrive in time.
        """
        op = op_name(op)
        if is_nest(value):
            return tree_map(lambda v: self.reduce(op, v, axis), value)
        tensor = as_tensor(value, self.device, "strategy.reduce")
        if not tensor.is_floating_point() and op == "mean":
            tensor = tensor.double()
        tensor = tensor.detach().clone()
        if axis is None:
            return self._group.all_reduce(tensor, op)
        if op == "mean":
            local = tensor.double().sum(axis)
            packed = torch.cat([local.reshape(-1), local.new_tensor([tensor.shape[axis]])])
            packed = self._group.all_reduce(packed, "sum")
            return (packed[:-1] / packed[-1]).reshape(local.shape).to(tensor.dtype)
        local = {"sum": tensor.sum, "max": lambda a: tensor.amax(a), "min": lambda a: tensor.amin(a)}[op](axis)
        return self._group.all_reduce(local.contiguous(), op)

    def gather(self, value: Any, axis: int = 0) -> torch.Tensor:
        """Concatenate every replica's ``value`` along ``axis``, in replica order (``Strategy.gather``).

        Sizes along ``axis`` may differ between replicas (an uneven last batch); other dimensions must match.
        Returns a tensor of shape ``(sum of sizes along axis, ...)`` on this replica's device; a dict, or a
        list/tuple holding tensors (Accelerate's ``gather((predictions, labels))``), gives the same structure,
        tensor by tensor. A collective (two all-gathers a tensor: the sizes, then the padded values).
        Raises ArgumentTypeError for a value that is no tensor or number.
        """
        if is_nest(value):
            return tree_map(lambda v: self.gather(v, axis), value)
        tensor = as_tensor(value, self.device, "strategy.gather")
        if tensor.dim() == 0:
            tensor = tensor.reshape(1)
        size = torch.tensor([tensor.shape[axis]], device=self.device)
        sizes = [int(s) for s in self._group.all_gather(size)]
        biggest = max(sizes)
        if tensor.shape[axis] < biggest:
            pad_shape = list(tensor.shape)
            pad_shape[axis] = biggest - tensor.shape[axis]
            tensor = torch.cat([tensor, tensor.new_zeros(pad_shape)], dim=axis)
        parts = self._group.all_gather(tensor.contiguous())
        return torch.cat([p.narrow(axis, 0, s) for p, s in zip(parts, sizes)], dim=axis)

    def barrier(self) -> None:
        """Wait until every replica reaches this call. A collective."""
        self._group.barrier()

    # -- gradients ---------------------------------------------------------------------------------------------
    def accumulate(self, k: int) -> Accumulation:
        """Gradient accumulation over ``k`` micro-batches with one all-reduce round, not ``k``.

        Use the returned object as a context around each micro-batch's backward; step the optimizer when
        ``acc.sync_step`` is True. Gradients are averaged over the ``k`` micro-batches and the replicas, so
        ``k`` micro-batches of size b equal one batch of size ``k * b``. Do not divide the loss by ``k``.

        The counter lives in the strategy: ``strategy.accumulate(k)`` returns the same object for the same ``k``,
        so ``with strategy.accumulate(4):`` written inside the loop (Accelerate's style) counts correctly too; but an
        ``optimizer.step()`` inside an open cycle (Accelerate's loop steps on every micro-batch: its optimizer skips)
        raises :class:`~allgpu.errors.UnsupportedError`: step under ``if acc.sync_step:``.
        Local; every replica must use the same ``k``, since the all-reduce of each k-th backward is a collective.
        """
        if k not in self._accumulations:
            self._accumulations[k] = Accumulation(self._sync, k)
        return self._accumulations[k]

    def open_accumulation(self) -> tuple[int, int] | None:
        """``(micro-batches pending, k)`` of an ``accumulate(k)`` cycle in progress, or None at a step boundary."""
        return next(((a.open_micro_batches, a.k) for a in self._accumulations.values() if a.open_micro_batches), None)

    def optimizer_in_backward(self, optimizer: torch.optim.Optimizer | None):
        """Step ``optimizer`` inside every synchronising backward, one gradient bucket at a time, as soon as that
        bucket's all-reduce completes (:mod:`allgpu.core.optim_backward`); ``None`` turns it off.

        Do not call ``optimizer.step()`` yourself while it is on (``zero_grad()`` as usual); parameters equal the
        ordinary step's for elementwise optimizers. Under accumulation the step happens on the k-th backward.
        Not with ``mixed_precision="fp16"`` (the loss scaler must see every gradient first). Local; every replica
        must turn it on for the same backward passes. Returns the :class:`~allgpu.core.optim_backward.BucketStepper`.
        """
        from allgpu.core.optim_backward import BucketStepper

        if optimizer is not None and self._no_optimizer_in_backward:
            from allgpu.errors import UnsupportedError

            raise UnsupportedError(f"{type(self).__name__} cannot step the optimizer inside backward: "
                                   f"{self._no_optimizer_in_backward} Fix: call optimizer.step() as usual.")
        self._mirror_pending()
        if optimizer is not None:
            stray = [p for group in optimizer.param_groups for p in group["params"]
                     if p.requires_grad and not self._sync.synchronises(p)]
            if stray:
                raise ArgumentError(f"optimizer_in_backward: {len(stray)} of the optimizer's parameters (the first of "
                                 f"shape {tuple(stray[0].shape)}) were not created in strategy.scope(), so no "
                                 "backward would step them. Fix: build the model in scope() or call "
                                 "strategy.mirror(model) first.")
        self._sync.stepper = None if optimizer is None else BucketStepper(optimizer)
        return self._sync.stepper

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally without all-reduce (DDP's ``no_sync``). Local; every
        replica must enter it for the same backward passes."""
        previous = self._sync.enabled
        self._sync.enabled = False
        try:
            yield
        finally:
            self._sync.enabled = previous

    # -- input -------------------------------------------------------------------------------------------------
    def distribute_dataset(self, dataset, global_batch_size: int | None = None, *, shuffle: bool | None = None,
                           seed: int = 0, num_workers: int | str | None = None, drop_remainder: bool | None = None,
                           collate_fn: Callable | None = None) -> DistributedDataset:
        """Each replica gets disjoint ``global_batch_size / num_replicas_in_sync``-example batches every step.

        Every iteration is a new epoch with a new order, the same on every replica, and so is a new
        ``distribute_dataset`` object over the same data (``tf.data``'s ``reshuffle_each_iteration``): the
        strategy counts epochs per (seed, dataset length, global batch). Randomness drawn inside the dataset's
        ``__getitem__`` is seeded per (seed, epoch, example index) (see :mod:`allgpu.core.data_rng`).
        See :class:`allgpu.core.data.DistributedDataset`. Raises ValueError when the global batch does not divide
        evenly, TypeError for an iterable-style dataset. Local: each replica computes its own shard from the
        common seed, with no communication. Defaults: ``shuffle=True``, ``drop_remainder=True``,
        ``num_workers="auto"``; a ``DataLoader`` given without ``global_batch_size`` is read as a batched
        ``tf.data`` dataset: its ``batch_size`` is the global batch and its shuffling, ``drop_last``,
        ``collate_fn`` and ``num_workers`` are kept (on a ``DistributedSampler``, a DDP port's or Ray's
        ``prepare_data_loader``'s, ``batch_size`` is per replica: :func:`allgpu.core.data.batched_loader_settings`). A
        ``tf.data.Dataset`` is split as ``tf.distribute`` splits it: :mod:`allgpu.keras.tf_data.distributed`.
        """
        self._one_program.fork()  # from now on each replica's torch stream (Dropout) is its own
        if is_tf_dataset(dataset):
            return tf_input.distribute_tf_dataset(self, dataset, global_batch_size, {
                "shuffle": shuffle, "seed": seed, "num_workers": num_workers, "drop_remainder": drop_remainder,
                "collate_fn": collate_fn})
        from_loader = global_batch_size is None and isinstance(dataset, DataLoader)
        global_batch_size, options = batched_loader_settings(
            dataset, global_batch_size, {"shuffle": shuffle, "num_workers": num_workers,
                                         "drop_remainder": drop_remainder, "collate_fn": collate_fn},
            self.num_replicas_in_sync)
        return DistributedDataset(dataset.dataset if from_loader else dataset, global_batch_size=global_batch_size,
                                  num_replicas=self.num_replicas_in_sync, rank=self.replica_id_in_sync,
                                  device=self.device, seed=seed, local_replicas=self._local_replicas(),
                                  epochs=self._data_epochs, sync=self._sync,
                                  verify=self._one_program.same_data, **options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], Any]) -> PerReplicaInput:
        """Call ``dataset_fn(input_context)`` on each replica; its iterable of per-replica batches is fed to the device.

        The function shards and batches for itself, using ``input_context.input_pipeline_id`` and
        ``input_context.get_per_replica_batch_size(global_batch_size)``. Local. A ``tf.data`` dataset it returns is
        read as TensorFlow reads it there: not re-batched or sharded, its batches delivered as torch tensors.
        Its iterator's ``get_next_as_optional()`` is a collective (replicas' pipelines may end at different steps:
        see :mod:`allgpu.core.dist_iterator`).
        """
        self._one_program.fork()
        context = InputContext(self.num_replicas_in_sync, self.replica_id_in_sync, self.num_replicas_in_sync)
        dataset = dataset_fn(context)
        if is_tf_dataset(dataset):
            return tf_input.per_replica_tf_dataset(self, dataset, context)
        return PerReplicaInput(dataset, self.device, context, every_replica_has_one(self))

    def _local_replicas(self) -> int:
        return self._group.local_world_size

    def close(self) -> None:
        """Leave the job: remove hooks, destroy the process group this strategy started. Every replica calls it
        (replica 0, which may host the job's store, leaves last)."""
        if self._check is not None:
            self._check.close()
        for accumulation in self._accumulations.values():
            accumulation.close()
        self._overlap.close()
        live.unregister(self)
        self._group.close()
        if self.placement.solo_group and not getattr(self, "_left_solo_group", False):
            self._left_solo_group = True
            release_solo_group()
