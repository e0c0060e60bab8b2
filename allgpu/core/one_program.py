"""One program's data: every replica starts from replica 0's random state, and a guard when replicas built
different data anyway.

Each replica runs the whole script (SPMD; a plain ``python train.py`` re-executes it once per extra device), so
code that draws random numbers draws them once per replica. ``tf.distribute`` prepares the data once, in one
program. To behave the same, :meth:`OneProgram.share` (called by every strategy's constructor, a collective) sets
Python's ``random``, NumPy's global generator and torch's default generator (CPU, and the replica's CUDA device)
on every replica to replica 0's states: unseeded ``np.random.permutation``, ``train_test_split`` without
``random_state``, ``torch.rand`` datasets or ``random.shuffle`` *after* the strategy's construction give the same
result on every replica. When TensorFlow is imported and its global seed is not set, it is set to one value derived
from that shared state (``tf.random.set_seed``), so an unseeded ``tf.data`` ``shuffle`` or ``tf.random`` op in the
pipeline gives the same order on every replica, as ``tf.distribute``'s one pipeline does; a seed the user set is
kept.

Not covered: code that runs *before* the strategy is constructed, in each replica's own process (NumPy and
``random`` are seeded from the operating system there, and so is torch's default generator on torch 2.13:
``torch.initial_seed()`` differs per process; older builds fixed it). :meth:`OneProgram.same_data` catches the consequence where it
matters: ``distribute_dataset``, ``fit``, ``evaluate`` and the Keras adapter compare a fingerprint of the data
(length and a hash of a few examples) across replicas at the first epoch and raise :class:`DataMismatchError`.

Randomness that must differ per replica stays per replica: when the first dataset is distributed
(:meth:`OneProgram.fork`), torch's default generator of each replica but replica 0 is re-seeded from the shared
state and the replica's index, so Dropout draws different masks on different replicas; checkpoints save and restore each
replica's states, so a resumed run continues exactly. Augmentation inside ``__getitem__`` is seeded per example
(:mod:`allgpu.core.data_rng`), the same at any number of replicas.
"""

from __future__ import annotations

import hashlib
import random
import sys
from typing import Any, Callable

import numpy as np
import torch

from allgpu.errors import DataMismatchError

SAMPLED = 4  # examples hashed besides the first and the last


def _states(device: torch.device) -> dict:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda" and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def _apply(states: dict, device: torch.device) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


class OneProgram:
    """The random state and data checks that make N replicas behave as one program. ``group`` is the
    :class:`allgpu.core.replica_group.ReplicaGroup`."""

    def __init__(self, group):
        self.group = group
        self.forked = False
        self._checked: set[tuple] = set()  # (kind, length) of the data already compared: the same on every replica

    def share(self) -> "OneProgram":
        """Set ``random``, NumPy's and torch's generators to replica 0's states; returns self. A collective (one
        broadcast)."""
        if self.group.world_size > 1:
            _apply(self.group.broadcast_object(_states(self.group.device), where="strategy start (random state)"),
                   self.group.device)
            _seed_tensorflow()
        return self

    def fork(self) -> None:
        """Once: give each replica but replica 0 its own torch stream (Dropout), seeded from a hash of the shared
        state and the replica's index. Replica 0 keeps its stream untouched, so it draws exactly what one replica
        would (a model built after ``distribute_dataset`` is initialised as on one replica). Local."""
        if self.forked or self.group.world_size == 1:
            return
        self.forked = True
        if self.group.rank:
            digest = hashlib.blake2b(torch.get_rng_state().numpy().tobytes(), digest_size=8).digest()
            seed = hash((int.from_bytes(digest, "little"), self.group.rank, 0xD20F)) & ((1 << 63) - 1)
            torch.manual_seed(seed)  # the CPU generator and, lazily, this process's CUDA ones

    def same_data(self, key: tuple, print_fn: Callable[[], tuple], what: str) -> None:
        """Compare ``print_fn()`` (a :func:`fingerprint`) across replicas, once per ``key`` (the data's kind and
        length: keys derived from the data itself, so every replica skips or compares alike). A collective.

        Raises:
            DataMismatchError: a replica's fingerprint differs from replica 0's, naming the difference and the fix.
        """
        if self.group.world_size == 1 or key in self._checked:
            return
        self._checked.add(key)
        prints = self.group.all_gather_object(print_fn(), where=f"{what}: same data on every replica")
        for rank, other in enumerate(prints):
            difference = _difference(prints[0], other, rank)
            if difference:
                raise DataMismatchError(_message(difference, what))


def _seed_tensorflow() -> None:
    """``tf.random.set_seed`` from the shared NumPy state (read, not drawn from: the user's NumPy stream is
    unchanged), when TensorFlow is imported and no global seed is set. Every replica computes the same value, and
    TensorFlow derives each unseeded op's seed from it and the op's position in the program: the same on every
    replica running the same script. NumPy's state is seeded by the operating system unless the user seeded it, so
    unseeded runs still differ from one another, as in TensorFlow."""
    if "tensorflow" not in sys.modules:
        return  # imported later: its unseeded ops stay per replica (the tf.data guard names the fix)
    from tensorflow.python.eager import context  # public tf.random.set_seed writes here; no public getter exists

    if getattr(context, "global_seed", lambda: 0)() is not None:
        return  # the user's seed (or a TensorFlow without the getter: left as it is)
    digest = hashlib.blake2b(np.random.get_state()[1].tobytes(), digest_size=4).digest()
    sys.modules["tensorflow"].random.set_seed(int.from_bytes(digest, "little") & 0x7FFFFFFF)


def fingerprint(length: int, example: Callable[[int], Any]) -> tuple:
    """``(length, ((index, hash of example index), ...))`` for the first, the last and ``SAMPLED`` examples spread
    evenly between them: a few milliseconds for any dataset size."""
    if length <= 0:
        return (length, ())
    indices = sorted({0, length - 1, *(length * (k + 1) // (SAMPLED + 1) for k in range(SAMPLED))})
    return (length, tuple((i, _stable_digest(example, i)) for i in indices))


def _stable_digest(example: Callable[[int], Any], index: int) -> str | None:
    """The example's hash, or None when two reads differ on this replica (a dataset drawing from its own
    unseeded generator): such an example says nothing about whether replicas built the same data."""
    first = _digest(example(index))
    return first if _digest(example(index)) == first else None


def _digest(value: Any) -> str:
    h = hashlib.blake2b(digest_size=8)
    _feed(h, value)
    return h.hexdigest()


def _feed(h, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode() + np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(str(key).encode())
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _feed(h, item)
    elif hasattr(value, "tobytes"):  # PIL images
        h.update(value.tobytes())
    else:
        h.update(repr(value).encode())


def _difference(first: tuple, other: tuple, rank: int) -> str | None:
    """How replica ``rank``'s fingerprint differs from replica 0's, or None (examples unstable on either side are
    not compared)."""
    if first[0] != other[0]:
        return f"replica 0's data has {first[0]:,} examples, replica {rank}'s {other[0]:,}"
    for (index, a), (_, b) in zip(first[1], other[1]):
        if a is not None and b is not None and a != b:
            return (f"both have {first[0]:,} examples, but example {index} differs between replica 0 and "
                    f"replica {rank}")
    return None


def _message(difference: str, what: str) -> str:
    return (f"{what}: the replicas built different data ({difference}). Each replica runs the script itself, and "
            "data prepared with unseeded randomness before the strategy was created (np.random.permutation, "
            "train_test_split without random_state, torch.rand, random.shuffle) differs on each. Fix: seed it "
            "(np.random.seed(0), random_state=0, torch.manual_seed(0)), or build the data after the strategy is "
            "created, where every replica starts from replica 0's random state.")
