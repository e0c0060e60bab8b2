"""``tf.data`` input for allgpu's replicas: Keras ``fit``/``evaluate``/``predict`` and the strategies' datasets.

Glossary: a *global batch* is one element of a batched ``tf.data.Dataset`` (``dataset.batch(B)``): the B examples
of one step across all replicas, as ``tf.distribute`` reads it. The *auto-shard policy* is
``dataset.options().experimental_distribute.auto_shard_policy`` (``tf.data.experimental.AutoShardPolicy``):

- ``DATA``: every replica runs the whole pipeline and keeps its contiguous ``B / N`` slice of each global batch,
  so N replicas together see exactly the examples one replica sees, in the same order;
- ``FILE``: replica r reads input files r, r + N, ... (``TFRecordDataset``, ``list_files``, ...), in per-replica
  batches of ``B / N`` (TensorFlow's own rewrite does the sharding);
- ``AUTO`` (the default): ``FILE`` when the pipeline reads enough files, else ``DATA``;
- ``OFF``: no sharding: every replica reads the whole dataset, each global batch cut into N batches of ``B / N``
  delivered one after another (what ``tf.distribute`` does with several workers).

The pipeline runs in TensorFlow on the CPU; batches become torch tensors (dicts and tuples kept) on the replica's
device. TensorFlow is imported only when a ``tf.data`` dataset is met (:func:`is_tf_dataset` never imports it).
:mod:`.runtime` imports it and keeps it from taking every core or any GPU; :mod:`.facts` reads what a dataset
declares; :mod:`.split` is this replica's stream of batches (NumPy, no torch); :mod:`.keras_source` feeds Keras,
:mod:`.distributed` feeds ``strategy.distribute_dataset`` and ``distribute_datasets_from_function``.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_tf_dataset", "limit_if_imported"]


def is_tf_dataset(obj: Any) -> bool:
    """True for a ``tf.data.Dataset`` (any of its subclasses), without importing TensorFlow."""
    cls = type(obj)
    return cls.__module__.startswith("tensorflow") and any(
        c.__name__ in ("DatasetV2", "DatasetV1") for c in cls.__mro__)


def limit_if_imported(local_replicas: int) -> None:
    """When TensorFlow is already imported, hide the GPUs from it and size its thread pools for this replica now,
    before the script's pipeline starts its runtime (:func:`.runtime.limit_tensorflow`). Never imports it."""
    if sys.modules.get("tensorflow") is not None:
        from allgpu.keras.tf_data.runtime import limit_tensorflow

        limit_tensorflow(local_replicas)
