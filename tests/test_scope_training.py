"""Issue 20, part 1: training inside an open ``strategy.scope()`` (TensorFlow's documented pattern) trains exactly
as training after it: custom loop, ``strategy.run``, ``allgpu.fit``, nested scopes, a second scope around training
with a layer built there, checkpoint save/restore, Keras ``fit``/``evaluate``; on every strategy, 1, 2 and 4
replicas, parameters equal to one replica trained outside the scope."""

import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "torch")  # before any import of keras, here and in the replicas

import pytest
import torch

import allgpu
from allgpu.errors import NotMirroredError
from tests.test_equivalence import make_data

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

STEPS, BATCH = 4, 16
TORCH_VARIANTS = ("loop", "run", "fit", "nested", "second", "checkpoint")
STRATEGIES = {
    "mirrored": lambda: allgpu.MirroredStrategy(),
    "multi_worker": lambda: allgpu.MultiWorkerMirroredStrategy(),
    "central_storage": lambda: allgpu.CentralStorageStrategy(),
    "fully_sharded": lambda: allgpu.FullyShardedStrategy(),
    "one_device": lambda: allgpu.OneDeviceStrategy("/cpu:0"),
}


def _build(rank: int):
    torch.manual_seed(rank)  # different on purpose: the scope must broadcast replica 0's values
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _loop(strategy, model, optimizer, steps, data, use_run=False):
    def step(x, y):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    for i, (x, y) in enumerate(data):
        if i == steps:
            break
        strategy.run(step, args=(x, y)) if use_run else step(x, y)


def _torch_variant(strategy, variant: str, inside: bool, folder: str):
    """One way of training; ``inside`` keeps training within the ``with`` block that built the model."""
    scope = strategy.scope if inside else _empty
    data = lambda: strategy.distribute_dataset(make_data(), BATCH, shuffle=False, num_workers=0)  # noqa: E731
    rank = strategy.replica_id_in_sync
    with strategy.scope():
        if variant == "nested":
            with strategy.scope():
                model, _ = _build(rank)
            with strategy.scope():
                optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        else:
            model, optimizer = _build(rank)
        with scope():
            if variant in ("loop", "nested", "run"):
                _loop(strategy, model, optimizer, STEPS, data(), use_run=variant == "run")
            elif variant == "fit":
                allgpu.fit(model, optimizer, torch.nn.MSELoss(), make_data(), epochs=1, global_batch_size=BATCH,
                           strategy=strategy, shuffle=False, num_workers=0, verbose=False, metrics=(),
                           max_steps_per_epoch=STEPS)
            elif variant == "checkpoint":
                _loop(strategy, model, optimizer, 2, data())
                allgpu.checkpoint.save(folder, model, optimizer, step=2)
                _loop(strategy, model, optimizer, 2, data())  # trained on, then thrown away by the restore
                allgpu.checkpoint.restore(folder, model, optimizer)
                _loop(strategy, model, optimizer, 2, data())
    if variant == "second":  # built in one scope; trained in a second one, with a layer built in that one
        with strategy.scope() if inside else _empty():
            torch.manual_seed(100 + rank)
            model = torch.nn.Sequential(model, torch.nn.Linear(1, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            if not inside:
                model = strategy.mirror(model)
        with scope():
            _loop(strategy, model, optimizer, STEPS, data())
    return _params(strategy, model)


class _empty:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def _params(strategy, model):
    if isinstance(strategy, allgpu.FullyShardedStrategy):
        return [v for _, v in sorted(strategy.full_state_dict(model).items())]
    return [p.detach().cpu().clone() for _, p in sorted(model.state_dict().items())]


def _keras_variant(strategy, inside: bool):
    """Seed 000 Example 1 on Keras 3 (PyTorch backend), digits for MNIST: built, compiled and trained in scope."""
    import keras
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = x[:320].astype("float32") / 16, keras.utils.to_categorical(y[:320], num_classes=10)
    keras.utils.set_random_seed(strategy.replica_id_in_sync)  # replica 0's initial weights must win
    scope = strategy.scope if inside else _empty
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(32, activation="relu", input_shape=(64,)),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        with scope():
            model.fit(x, y, epochs=3, batch_size=32, shuffle=False, verbose=0)
            loss, accuracy = model.evaluate(x, y, batch_size=32, verbose=0)
    return [torch.as_tensor(w) for w in model.get_weights()], accuracy


def _all_variants(kind: str, inside: bool, folder: str, keras_too: bool):
    strategy = STRATEGIES[kind]()
    try:
        out = {}
        for variant in TORCH_VARIANTS:
            out[variant] = _torch_variant(strategy, variant, inside, os.path.join(folder, variant))
        if keras_too:
            out["keras"] = _keras_variant(strategy, inside)
        return out
    finally:
        strategy.close()


@pytest.fixture(scope="module")
def reference():
    """One replica, every variant trained after its scope exited (the pattern that always worked)."""
    with tempfile.TemporaryDirectory() as folder:
        return allgpu.launch(_all_variants, num_replicas=1, args=("mirrored", False, folder, True))[0]


def _assert_equal_to_reference(results, reference, with_keras):
    for variant in TORCH_VARIANTS:
        for rank_result in results:
            for got, want in zip(rank_result[variant], reference[variant]):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, msg=f"{variant}")
    if with_keras:
        for rank_result in results:
            weights, accuracy = rank_result["keras"]
            for got, want in zip(weights, reference["keras"][0]):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg="keras")
            assert accuracy == pytest.approx(reference["keras"][1], abs=1e-6) and accuracy > 0.5


@pytest.mark.timeout(400)
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_training_inside_scope_equals_one_replica_trained_outside(reference, replicas, tmp_path):
    pytest.importorskip("keras")
    results = allgpu.launch(_all_variants, num_replicas=replicas,
                            args=("mirrored", True, str(tmp_path), replicas != 4))
    _assert_equal_to_reference(results, reference, with_keras=replicas != 4)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind", ["multi_worker", "central_storage", "fully_sharded"])
def test_every_strategy_trains_inside_its_scope(reference, kind, tmp_path):
    results = allgpu.launch(_all_variants, num_replicas=2, args=(kind, True, str(tmp_path), False))
    _assert_equal_to_reference(results, reference, with_keras=False)


def test_one_device_trains_inside_its_scope(reference, tmp_path):
    _assert_equal_to_reference([_all_variants("one_device", True, str(tmp_path), False)], reference, with_keras=False)


def test_a_model_built_outside_any_scope_still_gets_the_clear_error_inside_one():
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        outside = torch.nn.Linear(2, 2)
        with strategy.scope():
            inside = torch.nn.Linear(2, 2)  # pending: mirrored by the first training forward below
            with pytest.raises(NotMirroredError, match=r"Linear.weight.*created outside strategy.scope"):
                outside(torch.zeros(1, 2))
            inside(torch.zeros(1, 2)).sum().backward()
            assert strategy.gradient_sync.synchronises(inside.weight)
    finally:
        strategy.close()
