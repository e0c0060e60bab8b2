"""Unseeded random draws inside a Keras training or test step: each replica its own stream, as each replica's
examples are its own.

Under ``tf.distribute.MirroredStrategy`` the replica function runs once per device, and an unseeded
``tf.random.normal`` in it draws different numbers on each replica: a GAN's latent vectors, a VAE's noise, label
noise. A migrated step spells them ``keras.random.normal(shape)`` (Keras's global ``SeedGenerator``) or
``torch.randn(shape)`` (PyTorch's global generator); here each replica is a process seeded alike
(``keras.utils.set_random_seed``), so without this every replica drew the same noise and the N replicas' global
batch held each fake example N times. Layers' own seed generators (``Dropout``, a model's
``keras.random.SeedGenerator`` attribute) are offset per replica when the model is mirrored
(:meth:`allgpu.keras.replica.KerasReplica.mirror_built_variables`).

:class:`StepRandom` swaps, for the duration of each step, the global Keras seed state and PyTorch's CPU (and
current CUDA device's) generator state for this replica's own, and back after: outside the steps (data built
with ``keras.random`` or ``torch`` between two ``fit`` calls, which allgpu needs the same on every replica) the
streams stay shared. Replica 0 draws what it would draw from the shared state; replica r's streams start from
the shared seed offset by r.
"""

from __future__ import annotations

import torch

_OFFSET = 1_000_003  # the offset the replica index multiplies (the same as for layers' seed generators)


class StepRandom:
    """A context manager entered around each training / test step of replica ``rank`` of ``world``.

    With one replica it does nothing (draws are exactly Keras's own).
    """

    def __init__(self, rank: int, world: int, device: torch.device):
        self.rank, self.world, self.device = rank, world, torch.device(device)
        self._mine: tuple | None = None  # (keras seed state, torch CPU state, torch CUDA state or None)
        self._shared: tuple | None = None

    def __enter__(self):
        if self.world == 1:
            return self
        keras_state = _keras_state()
        self._shared = (keras_state.value.detach().clone(), torch.get_rng_state(), self._cuda_state())
        if self._mine is None:
            self._mine = self._first_streams()
        self._set(*self._mine)
        return self

    def __exit__(self, *exc) -> None:
        if self.world == 1 or self._shared is None:
            return
        self._mine = (_keras_state().value.detach().clone(), torch.get_rng_state(), self._cuda_state())
        self._set(*self._shared)
        self._shared = None

    def _first_streams(self) -> tuple:
        if self.rank == 0:
            return tuple(None if t is None else t.clone() for t in self._shared)
        keras_seed = self._shared[0].clone()
        keras_seed[0] += _OFFSET * self.rank
        generator = torch.Generator().manual_seed(torch.initial_seed() + _OFFSET * self.rank)
        cuda = None
        if self._shared[2] is not None:
            cuda_generator = torch.Generator(self.device).manual_seed(torch.initial_seed() + _OFFSET * self.rank)
            cuda = cuda_generator.get_state()
        return keras_seed, generator.get_state(), cuda

    def _cuda_state(self):
        return torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None

    def _set(self, keras_seed, cpu, cuda) -> None:
        _keras_state().assign(keras_seed)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, self.device)


def _keras_state():
    from keras.src.random.seed_generator import global_seed_generator

    return global_seed_generator().state
