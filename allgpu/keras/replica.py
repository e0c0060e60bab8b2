"""One Keras model (PyTorch backend) trained on every replica of a strategy, through its own ``fit``/``evaluate``.

:class:`KerasReplica` wraps the model object: it puts ``fit``, ``evaluate`` and ``get_metrics_result`` on the
instance (the class and the user's subclass stay untouched) and sets Keras's own ``train_function`` /
``test_function`` attributes, which Keras's trainer calls once per step. Inside:

- before the first step, the model and optimizer are built from one batch's shapes (Keras builds lazily), and
  every variable not yet mirrored is broadcast from replica 0 and its gradient handed to allgpu's bucketed
  all-reduce (:class:`allgpu.core.sync.GradientSync`, overlapping backward); Keras's optimizer then reads averaged
  ``param.grad``. Nothing else all-reduces gradients (Keras 3.15 has no PyTorch data parallelism of its own;
  a ``keras.distribution`` set beside allgpu is refused);
- inputs are split by :mod:`allgpu.keras.shard`; a replica's gradient is weighted by its share of the global
  batch, so an uneven last batch averages exactly as one replica would;
- metric state is summed across replicas whenever results are read (``tf.distribute``'s sync-on-read metric
  variables), so History, the progress bar, callbacks and ``evaluate`` see global values, identical everywhere;
- non-trainable floating-point state (BatchNormalization's moving statistics) is averaged after each step, as
  ``tf.distribute`` aggregates it (``MEAN``), so replicas stay identical (a variable frozen after sharding keeps
  its shards: it is the same everywhere without averaging);
- only replica 0 prints progress; checkpoint-writing callbacks write from replica 0 only
  (:mod:`allgpu.keras.callbacks`); ``save`` and ``save_weights`` called on every replica write once, by replica 0,
  and return on the others once the file is complete (:mod:`allgpu.core.one_writer`).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from allgpu.core.scope_record import mirror_when_built
from allgpu.errors import InputError, UnsupportedError
from allgpu.keras.callbacks import chief_prints, coordinated, wrap_callbacks
from allgpu.keras.fit_args import leading, shows_batch_logs, split_validation, unpack
from allgpu.keras.metrics import local_reads, read_reduced
from allgpu.keras.randomness import StepRandom
from allgpu.keras.tf_data import is_tf_dataset
from allgpu.keras.shard import ShardedInput, check_same_data, leading_size, make_input



def _seed_states(model) -> list:
    states = []
    for layer in model._flatten_layers(include_self=True):
        states.extend(sg.state for sg in getattr(layer, "_seed_generators", []))
    return states


class KerasReplica:
    """Makes ``model.fit`` / ``model.evaluate`` train and evaluate on every replica of ``strategy``.

    Built by ``strategy.scope()`` for each Keras model constructed inside it, or by ``strategy.mirror(model)``.
    ``fit``, ``evaluate`` and every metric read are collectives: every replica calls them, as SPMD code does.
    """

    def __init__(self, model, strategy):
        self.model = model
        self.strategy = strategy
        self.world = strategy.num_replicas_in_sync
        self.rank = strategy.replica_id_in_sync
        cls = type(model)
        self._fit, self._evaluate, self._predict = cls.fit, cls.evaluate, cls.predict
        self._train_on_batch, self._test_on_batch = cls.train_on_batch, cls.test_on_batch
        self._metrics_result = cls.get_metrics_result
        self._train_input: ShardedInput | None = None
        self._eval_input: ShardedInput | None = None  # what evaluate / fit's validation / test_on_batch reads
        self._discarded: list | None = None  # metric state before a padded step, restored before any read
        self._in_step = False
        self._batch_logs = True  # whether per-batch logs are shown or read (then each step's metrics are reduced)
        self._state_vars: list = []
        self._random = StepRandom(self.rank, self.world, strategy.device)  # unseeded draws in steps: per replica
        self._decorrelated: set[int] = set()
        self._save, self._save_weights = cls.save, cls.save_weights
        self._fitting = False  # inside fit, allgpu's wrapped saving callbacks coordinate their own writes
        for name in ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch",
                     "get_metrics_result", "save", "save_weights"):
            object.__setattr__(model, name, getattr(self, name))
        object.__setattr__(model, "_allgpu_replica", self)
        mirror_when_built(model, self._mirror_at_first_call)  # built at its first call, after the scope closed

    # -- variables ---------------------------------------------------------------------------------------------
    def mirror_built_variables(self) -> None:
        """Broadcast from replica 0 every built variable not yet mirrored; sync trainable ones' gradients.

        A collective. Seed-generator states are not broadcast but offset by the replica index, so Dropout draws
        different masks on each replica's different examples.
        """
        model = self.model
        seeds = {id(s) for s in _seed_states(model)}
        values = [v.value for v in model.variables if id(v) not in seeds and v.value is not None]
        optimizer = getattr(model, "optimizer", None)
        opt_values = [v.value for v in optimizer.variables] if optimizer is not None and optimizer.built else []
        self.strategy._mirror_keras(model, values, opt_values)
        for state in _seed_states(model):
            if id(state) not in self._decorrelated and self.rank:
                with torch.no_grad():
                    state.value[0] += 1_000_003 * self.rank
            self._decorrelated.add(id(state))
        self._state_vars = [v for v in model.non_trainable_variables
                            if id(v) not in seeds and v.aggregation not in ("sum", "only_first_replica")
                            and torch.is_floating_point(v.value) and not isinstance(v.value, DTensor)]

    def _mirror_at_first_call(self) -> None:
        """:meth:`mirror_built_variables` from inside the model's first training forward (a collective). Keras's
        mixed-precision autocast scope is open there, and a variable's ``value`` would be a cast copy: it is set
        aside so the variables themselves are mirrored."""
        from keras.src.backend.common.stateless_scope import in_stateless_scope
        from keras.src.backend.common.variables import AutocastScope

        if in_stateless_scope():
            return  # values held by the scope, not the variables: mirrored at a later call
        with AutocastScope(None):
            self.mirror_built_variables()

    def _prepare(self, data: ShardedInput) -> None:
        import keras

        if keras.distribution.distribution() is not None:
            raise UnsupportedError(
                f"keras.distribution is set ({type(keras.distribution.distribution()).__name__}) while allgpu's "
                f"{type(self.strategy).__name__} trains this model: both would all-reduce gradients. Fix: remove "
                "keras.distribution.set_distribution(...); allgpu's strategy distributes the model.")
        model = self.model
        batch = data.peek()
        with torch.no_grad():  # Keras builds lazily; build now to mirror before step 1
            has_targets = isinstance(batch, tuple) and len(batch) > 1 and batch[1] is not None
            if getattr(model, "compiled", False) and has_targets:
                model._symbolic_build(data_batch=batch)
            elif not model.built:  # predict() (no targets to build the loss from): build it by calling it
                _check_callable(model)
                model(batch[0] if isinstance(batch, tuple) else batch)
        self.mirror_built_variables()
        model.train_function = self._train_step
        model.test_function = self._test_step

    def _sharded(self) -> bool:
        from allgpu.keras.sharded import is_sharded

        return is_sharded(self.model)

    # -- steps (Keras's trainer calls these once per batch) --------------------------------------------------
    def _train_step(self, data):
        batch = data[0]
        sync = self.strategy.gradient_sync
        saved = sync.divisor
        source = self._train_input
        if self.world > 1 and source is not None and source.global_size:
            # weight = this replica's share of the batch; a replica past the end of a global batch smaller than the
            # replica count runs a repeated example (slice_bounds pads), whose gradient must count zero
            padded = self.rank >= source.global_size
            sync.divisor = float("inf") if padded else source.global_size / leading_size(batch)
            if padded:  # nor may it count in the loss or any metric (undone before a read, as in _test_step)
                self._discarded = [v.value.detach().clone() for v in self._metric_variables()]
        self._in_step = True
        try:
            with self.strategy._in_replica_context(), self._random:  # get_replica_context() in train_step
                logs = self.model.train_step(batch)
        finally:
            sync.divisor, self._in_step = saved, False
            self._restore_discarded()
        self._average_state()
        return logs

    def _test_step(self, data):
        source = self._eval_input
        if self.world > 1 and source is not None and source.global_size and self.rank >= source.global_size:
            # past the end of a global batch smaller than the replica count: the repeated example this replica
            # runs (slice_bounds pads; forward collectives need every replica) must not count in any metric
            self._discarded = [v.value.detach().clone() for v in self._metric_variables()]
        self._in_step = True
        try:
            with torch.no_grad(), self.strategy._in_replica_context(), self._random:
                return self.model.test_step(data[0])
        finally:
            self._in_step = False
            self._restore_discarded()

    def _metric_variables(self) -> list:
        return [v for m in self.model.metrics for v in m.variables]

    def _restore_discarded(self) -> None:
        if self._discarded is not None:
            for v, t in zip(self._metric_variables(), self._discarded):
                v.assign(t)
            self._discarded = None

    def _average_state(self) -> None:
        if self.world == 1 or not self._state_vars:
            return
        values = [v.value for v in self._state_vars]
        flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in values])
        flat = self.strategy.reduce("sum", flat) / self.world
        offset = 0
        with torch.no_grad():
            for t in values:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()

    # -- metrics -----------------------------------------------------------------------------------------------
    def get_metrics_result(self) -> dict:
        """The model's metric results over the examples of all replicas (a collective).

        Metric variables aggregated by ``"sum"`` (Keras's default for metrics) are summed across replicas,
        ``"mean"`` ones averaged; results are computed from those and local state is restored. Inside a step,
        when no progress bar or batch-level callback reads the step's logs, the local results are returned
        instead (one collective per step saved); every replica takes the same branch.
        """
        model = self.model
        self._restore_discarded()  # a padded test step's update is undone before its results are read
        if self.world == 1 or (self._in_step and not self._batch_logs):
            with local_reads():  # a step's logs nobody shows: the epoch's are reduced at its end
                return self._metrics_result(model)
        return read_reduced(self.strategy, [v for m in model.metrics for v in m.variables],
                            lambda: self._metrics_result(model))

    # -- fit / evaluate ----------------------------------------------------------------------------------------
    def _input(self, x, y, sample_weight, batch_size, shuffle, class_weight=None, seed=0, *, steps=None,
               steps_argument="steps", what="evaluate", policy=None) -> ShardedInput:
        if is_tf_dataset(x):
            from allgpu.keras.tf_data.keras_source import tf_data_source

            if class_weight is not None:  # as Keras's own tf.data adapter: each batch's weights from its labels
                from keras.src.trainers.data_adapters.tf_dataset_adapter import make_class_weight_map_fn
                x = x.map(make_class_weight_map_fn(class_weight))
            source = tf_data_source(x, y, sample_weight, batch_size, steps=steps, steps_argument=steps_argument,
                                    what=what, num_replicas=self.world, rank=self.rank,
                                    local_replicas=self.strategy._local_replicas(), all_reduce=self._all_reduce,
                                    policy=policy)
            return ShardedInput(source, self.strategy.device)
        return make_input(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, class_weight=class_weight,
                          num_replicas=self.world, rank=self.rank, device=self.strategy.device, seed=seed)

    def _all_reduce(self, values: list, op: str) -> list:
        return self.strategy.reduce(op, torch.tensor(values, dtype=torch.int64)).tolist()

    def _shared_seed(self) -> int:
        # numpy's global RNG on replica 0 (keras.utils.set_random_seed makes it reproducible), sent to all.
        mine = int(np.random.randint(0, 2**31 - 1)) if self.rank == 0 else 0
        return int(self.strategy.reduce("sum", torch.tensor(mine, dtype=torch.int64)))

    def _agreed(self, shows: bool) -> bool:
        # per-batch metrics are reduced when any replica shows or reads them: a script moved from Horovod passes
        # verbose=1 on replica 0 only, and a reduce on one replica alone would wait for ever. A collective.
        return shows if self.world == 1 else bool(self._all_reduce([int(shows)], "max")[0])

    def _verbose(self, verbose):
        return verbose if self.rank == 0 else 0

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        """``keras.Model.fit`` on every replica: ``batch_size`` is the global batch, split across replicas.

        A collective (every replica calls it). Returns Keras's ``History`` with global metrics.
        """
        if validation_split and validation_data is None:
            if is_tf_dataset(x):
                raise InputError("validation_split cannot split a tf.data.Dataset (as in Keras). Fix: pass "
                                 "validation_data=<another dataset>, e.g. from dataset.take(n) / dataset.skip(n).")
            (x, y, sample_weight), validation_data = split_validation(x, y, sample_weight, validation_split)
        seed = self._shared_seed() if shuffle else 0
        train = self._input(x, y, sample_weight, batch_size, shuffle, class_weight, seed, steps=steps_per_epoch,
                            steps_argument="steps_per_epoch", what="fit")
        check_same_data(train, self.strategy, "fit")
        val = None
        if validation_data is not None:
            val_batch = None if is_tf_dataset(validation_data) else validation_batch_size or batch_size
            val = self._input(*unpack(validation_data), val_batch, False, steps=validation_steps,
                              steps_argument="validation_steps", what="validation")
            check_same_data(val, self.strategy, "fit(validation_data=...)")
        self._prepare(train)
        self._train_input, self._eval_input, self._fitting = train, val, True
        self._batch_logs = self._agreed(shows_batch_logs(verbose, callbacks, "on_train_batch_end", "on_batch_end",
                                                          "on_test_batch_end"))
        try:
            with chief_prints(self.rank):
                return self._fit(self.model, train, epochs=epochs, verbose=self._verbose(verbose),
                                 callbacks=wrap_callbacks(callbacks, self.strategy, train, self._sharded()),
                                 validation_data=val, shuffle=False, initial_epoch=initial_epoch,
                                 steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                                 validation_freq=validation_freq)
        finally:
            self._train_input, self._eval_input, self._fitting = None, None, False

    # -- saving: one program's way ----------------------------------------------------------------------------
    def save(self, filepath, *args, **kwargs):
        """``keras.Model.save`` callable on every replica: replica 0 writes (to a temporary name, renamed when
        complete), the others return once the file is complete, so ``keras.models.load_model`` right after works
        everywhere (:class:`allgpu.core.one_writer.OneWriter`). Also works called on replica 0 alone."""
        return self._one_write(filepath, lambda target: self._save(self.model, target, *args, **kwargs), "model.save")

    def save_weights(self, filepath, *args, **kwargs):
        """``keras.Model.save_weights``, written once as :meth:`save` is."""
        return self._one_write(filepath, lambda target: self._save_weights(self.model, target, *args, **kwargs),
                               "model.save_weights")

    def _one_write(self, filepath, write, what: str):
        if (self._fitting and coordinated()) or not isinstance(filepath, (str, os.PathLike)):
            return write(filepath)
        return self.strategy._writer.write(filepath, write, what, collective=self._sharded())

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        """``keras.Model.evaluate`` on every replica: each example is evaluated once, on one replica, and loss and
        metrics are reduced over all of them (equal to one replica's). A collective."""
        outer = self._eval_input, self._batch_logs  # fit's, when a callback evaluates during fit
        if not kwargs.get("_use_cached_eval_dataset"):
            x = self._input(x, y, sample_weight, batch_size, False, steps=steps)
            check_same_data(x, self.strategy, "evaluate")
            self._prepare(x)
            self._eval_input = x
            self._batch_logs = self._agreed(shows_batch_logs(verbose, callbacks, "on_test_batch_end"))
            y = sample_weight = batch_size = None
            callbacks = wrap_callbacks(callbacks, self.strategy, None, self._sharded())
        try:
            with chief_prints(self.rank):
                return self._evaluate(self.model, x, y, batch_size=batch_size, verbose=self._verbose(verbose),
                                      sample_weight=sample_weight, steps=steps, callbacks=callbacks,
                                      return_dict=return_dict, **kwargs)
        finally:
            self._eval_input, self._batch_logs = outer

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        """``keras.Model.train_on_batch`` with ``x`` a global batch: each replica trains on its slice; one step.
        Returns global logs. A collective."""
        data = self._input(x, y, sample_weight, leading(x), False, class_weight)
        self._prepare(data)
        local = next(iter(data))  # this replica's slice; data.global_size is the global batch
        self._train_input, self._batch_logs = data, True
        try:
            return self._train_on_batch(self.model, *unpack(local), return_dict=return_dict)
        finally:
            self._train_input, self._fitting = None, False

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """``keras.Model.test_on_batch`` with ``x`` a global batch, split across replicas; global logs."""
        data = self._input(x, y, sample_weight, leading(x), False)
        self._prepare(data)
        self._eval_input, self._batch_logs = data, True
        local = next(iter(data))  # data.global_size is now the global batch's
        return self._test_on_batch(self.model, *unpack(local), return_dict=return_dict)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """``keras.Model.predict`` on every replica: each replica predicts its slices of every global batch and the
        outputs are gathered, in input order, on every replica (the same array everywhere). A collective."""
        data = self._input(x, None, None, batch_size, False, steps=steps, what="predict", policy="DATA")
        self._prepare(data)
        with chief_prints(self.rank):
            local = self._predict(self.model, data, verbose=self._verbose(verbose), steps=steps, callbacks=callbacks)
        if self.world == 1:
            return local
        from keras import tree

        sizes = [size for size, _ in data.delivered]
        counts = self.strategy.gather(torch.tensor([[n for _, n in data.delivered]]), axis=0).cpu().numpy()
        return tree.map_structure(lambda a: self._in_input_order(a, sizes, counts), local)

    def predict_on_batch(self, x):
        """``keras.Model.predict_on_batch`` with ``x`` a global batch: each replica predicts its slice and the
        predictions are gathered, in input order, on every replica (NumPy, as Keras returns). A collective."""
        return self.predict(x, batch_size=leading(x), verbose=0)

    def _in_input_order(self, array, sizes: list[int], counts: np.ndarray) -> np.ndarray:
        gathered = self.strategy.gather(torch.as_tensor(np.asarray(array)), axis=0).cpu().numpy()
        cursor = np.concatenate([[0], np.cumsum(counts.sum(axis=1))[:-1]])  # where each replica's block starts
        pieces = []
        for step, size in enumerate(sizes):
            for r in range(self.world):
                n = int(counts[r, step])
                if size >= self.world or r < size:  # replicas past a tiny last batch predicted padding
                    pieces.append(gathered[cursor[r]:cursor[r] + n])
                cursor[r] += n
        return np.concatenate(pieces)


def _check_callable(model) -> None:
    """A model Keras 3 cannot build by calling it (no ``call()``: a GAN whose ``train_step`` calls its parts)."""
    import keras

    if type(model).call is keras.Model.call:
        raise UnsupportedError(
            f"{type(model).__name__} defines no call() and is not built, so Keras 3 cannot build it from a batch "
            "(plain Keras 3 refuses it too: 'Unable to automatically build the model'; TensorFlow's Keras 2 fit did "
            "not need to). Fix: end its __init__ with `self.built = True` when its sub-models are built (each "
            "with a keras.Input), as keras-io's Keras 3 GAN does, or define call().")
