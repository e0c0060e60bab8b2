"""What a ``tf.data.Dataset`` declares about itself, read before any element is produced, and the checks on it.

``tf.distribute`` reads a batched dataset's batch size as the *global* batch and splits it across replicas
(``experimental_distribute_dataset``); these facts are what that needs: the global batch ``B`` (from the last
``batch``/``padded_batch`` of the pipeline, TensorFlow's own ``compute_batch_size``), the number of global
batches (``Dataset.cardinality()``: a count, infinite after ``repeat()``, or unknown after ``filter``), and the
auto-shard policy of the dataset's options.
"""

from __future__ import annotations

from dataclasses import dataclass

from allgpu.errors import InputError, UnsupportedError
from allgpu.keras.tf_data.runtime import import_tensorflow

INFINITE, UNKNOWN = -1, -2  # tf.data.INFINITE_CARDINALITY, tf.data.UNKNOWN_CARDINALITY
POLICIES = ("AUTO", "FILE", "DATA", "OFF")
# Dataset ops that group examples into batches, and the ones that take batches apart again.
_BATCHING = ("BatchDataset", "BatchDatasetV2", "PaddedBatchDataset", "PaddedBatchDatasetV2", "ParallelBatchDataset",
             "MapAndBatchDataset", "ExperimentalMapAndBatchDataset", "RebatchDataset", "RebatchDatasetV2")
_UNBATCHING = ("UnbatchDataset", "ExperimentalUnbatchDataset")


@dataclass(frozen=True)
class DatasetFacts:
    """A dataset's declarations.

    Attributes:
        global_batch_size: B, examples per global batch; None when the pipeline batches but its size cannot be read
            statically (a ``map`` after ``batch``): then the first batch's size is used.
        cardinality: global batches per pass, or ``INFINITE`` (-1) / ``UNKNOWN`` (-2).
        policy: ``"AUTO"``, ``"FILE"``, ``"DATA"`` or ``"OFF"``.
    """

    global_batch_size: int | None
    cardinality: int
    policy: str

    @property
    def infinite(self) -> bool:
        return self.cardinality == INFINITE

    @property
    def num_batches(self) -> int | None:
        return self.cardinality if self.cardinality >= 0 else None


def _last_batching_op(dataset) -> str | None:
    """The batching op nearest the output along the main input chain, or None when an unbatch or the source
    comes first. Reads the pipeline's serialised graph."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())  # the pipeline as TensorFlow serialises it
    nodes = {n.name: n for n in graph.node}
    consumed = {i.split(":")[0].lstrip("^") for n in graph.node for i in n.input}
    outputs = [n for n in graph.node if n.op == "_Retval"] or \
        [n for n in graph.node if n.name not in consumed and n.op.endswith("Dataset")]  # what returns the dataset
    node = outputs[0] if outputs else None
    while node is not None:
        if node.op in _BATCHING:
            return node.op
        if node.op in _UNBATCHING or (node.op.endswith("Dataset") and not node.input):
            return None
        node = nodes.get(node.input[0].split(":")[0]) if node.input else None
    return None


def read_facts(dataset) -> DatasetFacts:
    """Read ``dataset``'s global batch, cardinality and auto-shard policy (no element is produced).

    Raises:
        InputError: the dataset is not batched (no ``.batch(B)`` after the last ``unbatch``).
        UnsupportedError: ``AutoShardPolicy.HINT``, which needs ``tf.data.experimental.SHARD_HINT`` placeholders
            that only TensorFlow's own runtime fills.
    """
    tf = import_tensorflow()
    from tensorflow.python.ops import gen_experimental_dataset_ops

    policy = dataset.options().experimental_distribute.auto_shard_policy
    name = tf.data.experimental.AutoShardPolicy(policy).name
    if name not in POLICIES:
        raise UnsupportedError(f"AutoShardPolicy.{name} is not supported by allgpu. Fix: use DATA, FILE, AUTO or OFF "
                               "in dataset.options().experimental_distribute.auto_shard_policy.")
    size = int(gen_experimental_dataset_ops.compute_batch_size(dataset._variant_tensor))
    if size <= 0:
        if _last_batching_op(dataset) is None:
            raise InputError(
                f"the tf.data dataset is not batched (its elements have shapes {_shapes(dataset)}), so there is no "
                "global batch to split across replicas. Fix: end the pipeline with .batch(global_batch_size) (and "
                ".prefetch(...)), as tf.distribute requires.")
        size = None
    return DatasetFacts(size, int(dataset.cardinality()), name)


def is_batched(dataset) -> bool:
    """True when ``dataset`` ends in a batching op (``.batch(B)`` after its last ``unbatch``). Reads the graph."""
    from tensorflow.python.ops import gen_experimental_dataset_ops

    import_tensorflow()
    if int(gen_experimental_dataset_ops.compute_batch_size(dataset._variant_tensor)) > 0:
        return True
    return _last_batching_op(dataset) is not None


def _shapes(dataset) -> str:
    import tensorflow as tf

    return str(tf.nest.map_structure(lambda s: tuple(s.shape) if hasattr(s, "shape") else s, dataset.element_spec))


def check_divisible(global_batch_size: int, num_replicas: int) -> int:
    """``B / N``. Raises InputError naming both numbers and the nearest batch sizes that divide."""
    if global_batch_size % num_replicas:
        lower = global_batch_size // num_replicas * num_replicas
        raise InputError(
            f"the tf.data dataset's batch of {global_batch_size} (the global batch) does not divide among "
            f"{num_replicas} replicas. Fix: .batch({lower or num_replicas}) or .batch({lower + num_replicas}), a "
            f"multiple of {num_replicas}.")
    return global_batch_size // num_replicas


def check_finite(facts: DatasetFacts, steps, what: str, argument: str) -> None:
    """Raise InputError when ``facts`` say infinite (``repeat()``) and ``steps`` is None: ``what`` would never end."""
    if facts.infinite and steps is None:
        raise InputError(f"the tf.data dataset is infinite (it calls .repeat() without a count), so {what} would "
                         f"never end. Fix: pass {argument}=<batches per epoch>, or .repeat(n) / drop .repeat().")
