"""Keras 3 (PyTorch backend) under FullyShardedStrategy on real Gloo replicas: model.fit on N replicas, each holding
~1/N of the trainable variables and of Adam's moments, ends with the weights of one MirroredStrategy replica."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np
import pytest

keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import allgpu  # noqa: E402

pytestmark = pytest.mark.replicas
N, BATCH = 210, 32  # the last global batch has 18 examples: uneven over 4 replicas (5, 5, 4, 4)


def regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 6)).astype("float32")
    y = np.tanh(x @ rng.normal(size=(6, 1))).astype("float32")
    return x, y


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(24, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


def build(kind):
    if kind == "sequential":  # lazily built: sharded inside the first fit
        return keras.Sequential([keras.layers.Dense(24, activation="tanh"), keras.layers.Dense(1)])
    if kind == "functional":  # built inside scope(): sharded at scope exit, before Adam builds its moments
        inputs = keras.Input((6,))
        return keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(24, activation="tanh")(inputs)))
    return Subclassed()


def _held(model):
    """Bytes of trainable variables + optimizer variables: (this replica's shards, all shards, replicated ones)."""
    from torch.distributed.tensor import DTensor

    mine = sharded = replicated = 0
    for v in list(model.trainable_variables) + list(model.optimizer.variables):
        value = v.value
        if isinstance(value, DTensor):
            mine += value.to_local().numel() * value.element_size()
            sharded += value.numel() * value.element_size()
        else:
            replicated += value.numel() * value.element_size()
    return mine, sharded, replicated


def train(kind, sharded):
    strategy = allgpu.FullyShardedStrategy() if sharded else allgpu.MirroredStrategy()
    keras.utils.set_random_seed(strategy.replica_id_in_sync)  # different on purpose: variables must be broadcast
    x, y = regression_data()
    with strategy.scope():
        model = build(kind)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])
    history = model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0,
                        validation_data=(x[:50], y[:50]))
    final = model.evaluate(x, y, batch_size=40, verbose=0, return_dict=True)
    predictions = model.predict(x[:103], batch_size=BATCH, verbose=0)
    held = _held(model)
    return [w.copy() for w in model.get_weights()], history.history, final, predictions, held


@pytest.fixture(scope="module")
def single():
    return {kind: allgpu.launch(train, num_replicas=1, args=(kind, False))[0]
            for kind in ("sequential", "functional", "subclassed")}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind,replicas", [("sequential", 2), ("functional", 2), ("subclassed", 2),
                                           ("sequential", 4)])
def test_sharded_replicas_match_one_replica(single, kind, replicas):
    weights1, history1, final1, predictions1, _ = single[kind]
    whole = sum(w.nbytes for w in weights1) * 3  # the variables and Adam's two moments (all float32)
    results = allgpu.launch(train, num_replicas=replicas, args=(kind, True))
    for weights, history, final, predictions, (mine, sharded, replicated) in results:
        for got, want in zip(weights, weights1):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        for name, values in history.items():
            np.testing.assert_allclose(values, history1[name], rtol=1e-4)
        np.testing.assert_allclose([final["loss"], final["mae"]], [final1["loss"], final1["mae"]], rtol=1e-4)
        np.testing.assert_allclose(predictions, predictions1, rtol=1e-5, atol=1e-6)
        assert sharded == whole and replicated <= 16  # only Adam's step count and learning rate are whole
        assert mine < whole / replicas * 1.5  # dim-0 chunks of (6, 24) and (1,) are uneven over 4
    assert sum(mine for *_, (mine, _, _) in results) == whole  # each element on exactly one replica
    for other in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(results[0][0], other[0]))


class Regularised(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(16, activation="relu")
        self.norm = keras.layers.BatchNormalization()  # statistics stay replicated (averaged after each step)
        self.drop = keras.layers.Dropout(0.3)
        self.out = keras.layers.Dense(3)

    def call(self, x, training=False):
        return self.out(self.drop(self.norm(self.dense(x), training=training), training=training))


def _regularised(sharded):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    strategy = allgpu.FullyShardedStrategy() if sharded else allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    x, _ = regression_data()
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5)
    with strategy.scope():
        model = Regularised()
        model.compile(optimizer="adamw", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(x, y, batch_size=BATCH, epochs=4, verbose=0)
    return history.history, [w.copy() for w in model.get_weights()]


@pytest.mark.timeout(120)
def test_batchnorm_dropout_bfloat16_adamw_sharded_equal_mirrored():
    # Batch statistics are per replica (as under tf.distribute), so compare with MirroredStrategy on 2 replicas.
    mirrored = allgpu.launch(_regularised, num_replicas=2, args=(False,))
    for (history, weights), (history_m, weights_m) in zip(allgpu.launch(_regularised, num_replicas=2, args=(True,)),
                                                          mirrored):
        assert history["loss"][-1] < history["loss"][0]
        np.testing.assert_allclose(history["loss"], history_m["loss"], rtol=1e-3)
        for got, want in zip(weights, weights_m):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def _save_and_restore(directory, sharded):
    strategy = allgpu.FullyShardedStrategy() if sharded else allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    x, y = regression_data()
    with strategy.scope():
        model = build("sequential")
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")

    def callbacks():
        return [keras.callbacks.BackupAndRestore(os.path.join(directory, "backup"), delete_checkpoint=False),
                keras.callbacks.ModelCheckpoint(os.path.join(directory, "best.weights.h5"), monitor="loss",
                                                save_weights_only=True, save_best_only=True)]

    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=callbacks())
    model.set_weights([np.zeros_like(w) for w in model.get_weights()])  # only a restore from disk brings them back
    history = model.fit(x, y, batch_size=BATCH, epochs=6, shuffle=False, verbose=0, callbacks=callbacks())
    weights = [w.copy() for w in model.get_weights()]
    path = os.path.join(directory, f"model{strategy.replica_id_in_sync}.keras")
    model.save(path)  # gathers the shards (every replica calls it; each writes its own file here)
    loaded = keras.models.load_model(path)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), weights))
    os.remove(path)
    return len(history.history["loss"]), weights


@pytest.mark.timeout(120)
def test_backup_and_restore_and_model_checkpoint_on_a_sharded_model(tmp_path):
    (epochs1, weights1), = allgpu.launch(_save_and_restore, num_replicas=1, args=(str(tmp_path / "one"), False))
    assert epochs1 == 3  # the second fit resumed at epoch 3
    for epochs, weights in allgpu.launch(_save_and_restore, num_replicas=2, args=(str(tmp_path / "two"), True)):
        assert epochs == 3
        for got, want in zip(weights, weights1):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["backup", "best.weights.h5"]
