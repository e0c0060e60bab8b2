"""A distributed dataset's ``element_spec``: the structure, shapes and dtypes of this replica's batches.

TensorFlow's ``tf.distribute.DistributedDataset.element_spec`` describes what one replica receives, with the
batch dimension the per-replica batch size when every batch has it (``drop_remainder=True``), else None. allgpu
gives the same nest (tuple, list, dict) of :class:`TensorSpec`, with torch dtypes, read without producing a batch of
the pipeline: from one example of a map-style dataset, or from a ``tf.data`` dataset's own ``element_spec``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map
from torch.utils.data import default_collate


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a batch (``tf.TensorSpec``'s fields): ``shape``, a tuple whose entries are sizes or None
    (unknown, as TensorFlow's None), and ``dtype``, a ``torch.dtype`` (a NumPy dtype for strings)."""

    shape: tuple
    dtype: Any


def _leaf(value: Any, batch: int | None) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorSpec((batch, *value.shape[1:]), value.dtype)
    return value


def spec_of_example(example: Any, batch: int | None, collate_fn: Callable | None = None) -> Any:
    """The spec of batches of ``batch`` examples (None: sizes vary) like ``example``, as ``collate_fn`` (default:
    PyTorch's ``default_collate``) would batch them. Non-tensor leaves (strings) are kept as they are."""
    collated = (collate_fn or default_collate)([example])
    return tree_map(lambda v: _leaf(v, batch), collated)
