"""Two false ``NotMirroredError``s a stranger found, on real Gloo replicas (1 and 2) compared with one:

- a Keras model adopted by ``scope()`` (or ``mirror()``) before it was built (a ``Sequential`` without ``Input``)
  creates its variables at its first call, inside ``strategy.run``: they are mirrored there (broadcast from replica
  0, gradients averaged), as ``tf.distribute`` mirrors a model built in its scope;
- a model built outside any scope may be evaluated (TensorFlow's custom-training tutorial restores a checkpoint into
  a fresh ``create_model()`` and calls ``new_model(images, training=False)``): only training it is an error;
- ``model.load_state_dict(state, assign=True)`` into a model built in the scope (pytorch/examples' FSDP2 example
  resumes so) replaces its parameter objects: they stay mirrored (Mirrored) or are FSDP2's new shards (FullySharded).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before any import of keras, here and in the replicas

import numpy as np
import pytest
import torch

import allgpu
from allgpu.errors import NotMirroredError

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


def _create_model():
    import keras

    return keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])


def _restore_without_strategy(folder: str):
    """TensorFlow's custom-training tutorial: train under a strategy, save; restore into a model built outside any
    scope and evaluate it; then training that model is still the clear error."""
    import keras

    strategy = allgpu.MirroredStrategy()
    rank = strategy.replica_id_in_sync
    keras.utils.set_random_seed(rank)
    try:
        with strategy.scope():
            model = _create_model()
            optimizer = keras.optimizers.SGD(0.1)
            checkpoint = allgpu.checkpoint.Checkpoint(model=model, optimizer=optimizer)

        def step(x):
            with torch.enable_grad():
                loss = (model(x, training=True) ** 2).mean()
                loss.backward()
            optimizer.apply([v.value.grad for v in model.trainable_variables], model.trainable_variables)

        strategy.run(step, args=(_data(rank),))
        path = checkpoint.save(os.path.join(folder, "ckpt"))
        images = _data(5)
        want = np.array(model(images, training=False).detach())

        new_model = _create_model()  # outside any scope
        new_model(images[:1], training=False)  # build, as the tutorial's first evaluation does
        allgpu.checkpoint.Checkpoint(model=new_model).restore(path).expect_partial()
        got = np.array(new_model(images, training=False).detach())  # evaluation: no error
        try:
            new_model(images, training=True).mean().backward()  # training it: the clear error
            error = None
        except NotMirroredError as exc:
            error = str(exc)
        return want, got, error
    finally:
        strategy.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_restored_model_outside_the_scope_evaluates_and_refuses_training(replicas, tmp_path):
    results = allgpu.launch(_restore_without_strategy, num_replicas=replicas, args=(str(tmp_path),))
    for want, got, error in results:
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert error is not None and "created outside strategy.scope()" in error and "Keras variable" in error


def test_a_torch_model_outside_the_scope_evaluates_in_eval_mode_and_refuses_training():
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)).eval()
        out = model(torch.zeros(2, 3))  # eval() with gradients enabled: evaluation, no error
        with pytest.raises(NotMirroredError, match=r"(?s)Sequential\.\d\.(weight|bias).*strategy.mirror\(model\)"):
            out.sum().backward()  # but a gradient for it is training
        with pytest.raises(NotMirroredError, match=r"Sequential.0.weight"):
            model.train()(torch.zeros(2, 3))  # a training forward raises at once, as before
        strategy.mirror(model)
        model(torch.zeros(2, 3)).sum().backward()  # mirrored now: the armed gradient hooks let it through
    finally:
        strategy.close()


def _assign_load(kind: str):
    strategy = (allgpu.FullyShardedStrategy if kind == "sharded" else allgpu.MirroredStrategy)()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    live = model.state_dict()  # under FullyShardedStrategy DTensors: .shape is the full shape
    torch.manual_seed(1)
    same = {k: torch.randn(v.shape) for k, v in live.items()}  # what every replica loads, as from one file
    if kind == "sharded":  # the FSDP2 example's checkpointer: distribute_tensor on the live layout, then assign
        from torch.distributed.tensor import distribute_tensor

        same = {k: torch.nn.Parameter(distribute_tensor(v, live[k].device_mesh, live[k].placements))
                for k, v in same.items()}
    model.load_state_dict(same, assign=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    share = GLOBAL // strategy.num_replicas_in_sync
    for step in range(3):
        x = _data(step)[strategy.replica_id_in_sync * share:][:share]
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in strategy.full_state_dict(model).items()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["mirrored", "sharded"])
def test_load_state_dict_with_assign_keeps_a_scope_model_training_on_every_replica(kind):
    """Before: NotMirroredError ('created outside strategy.scope()') at the first step after the load."""
    one = allgpu.launch(_assign_load, num_replicas=1, args=(kind,))[0]
    two = allgpu.launch(_assign_load, num_replicas=2, args=(kind,))[0]  # replica 0 holds the full state
    for name, want in one.items():
        torch.testing.assert_close(two[name], want, rtol=1e-5, atol=1e-6)
