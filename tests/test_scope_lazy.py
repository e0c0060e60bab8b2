"""False ``NotMirroredError``s a stranger found, on real Gloo replicas (1 and 2) compared with one:

- a Keras model adopted by ``scope()`` (or ``mirror()``) before it was built (a ``Sequential`` without ``Input``)
  creates its variables at its first call, inside ``strategy.run``: they are mirrored there (broadcast from replica
  0, gradients averaged), as ``tf.distribute`` mirrors a model built in its scope;"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before any import of keras, here and in the replicas

import numpy as np
import pytest
import torch

import allgpu

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

GLOBAL = 8  # examples a step, split evenly over the replicas


def _data(step: int) -> torch.Tensor:
    return torch.linspace(-1, 1, GLOBAL * 3).reshape(GLOBAL, 3) * (step + 1)


def _lazy_keras(use_mirror: bool):
    """A Sequential with no Input built in scope (or mirrored), trained 3 steps by strategy.run; SGD by hand."""
    import keras

    strategy = allgpu.MirroredStrategy()
    rank, world = strategy.replica_id_in_sync, strategy.num_replicas_in_sync
    keras.utils.set_random_seed(rank)  # different on purpose: replica 0's initial weights must win
    try:
        if use_mirror:
            model = strategy.mirror(keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(2)]))
        else:
            with strategy.scope():
                model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(2)])
        assert not model.built

        def step(x):
            (model(x, training=True) ** 2).mean().backward()
            with torch.no_grad():
                for v in model.trainable_variables:
                    v.value.sub_(0.1 * v.value.grad)
                    v.value.grad = None

        share = GLOBAL // world
        for i in range(3):
            strategy.run(step, args=(_data(i)[rank * share:(rank + 1) * share],))
        return [np.array(w) for w in model.get_weights()]
    finally:
        strategy.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("use_mirror", [False, True], ids=["scope", "mirror"])
def test_a_keras_model_built_at_its_first_call_in_run_is_mirrored(use_mirror):
    one = allgpu.launch(_lazy_keras, num_replicas=1, args=(use_mirror,))[0]
    two = allgpu.launch(_lazy_keras, num_replicas=2, args=(use_mirror,))
    for rank_weights in two:  # replica 1 started from other weights and other data: equal only if mirrored
        for got, want in zip(rank_weights, one):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
