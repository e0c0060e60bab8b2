"""Keras 3 (PyTorch backend) on real Gloo replicas: model.fit on N replicas at global batch B trains like one at B."""

import contextlib
import io
import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import allgpu  # noqa: E402
from allgpu.errors import NotMirroredError  # noqa: E402

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
    if kind == "sequential":  # lazily built: its variables appear inside fit, after scope() exits
        return keras.Sequential([keras.layers.Dense(24, activation="tanh"), keras.layers.Dense(1)])
    if kind == "functional":  # built inside scope()
        inputs = keras.Input((6,))
        return keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(24, activation="tanh")(inputs)))
    return Subclassed()


def train(kind):
    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(strategy.replica_id_in_sync)  # different on purpose: variables must be broadcast
    x, y = regression_data()
    with strategy.scope():
        model = build(kind)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])
    history = model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0,
                        validation_data=(x[:50], y[:50]))
    final = model.evaluate(x, y, batch_size=40, verbose=0, return_dict=True)
    return [w.copy() for w in model.get_weights()], history.history, final, strategy.gradient_sync.rounds


@pytest.fixture(scope="module")
def single():
    return {kind: allgpu.launch(train, num_replicas=1, args=(kind,))[0]
            for kind in ("sequential", "functional", "subclassed")}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("kind", ["sequential", "functional", "subclassed"])
def test_replicas_match_one_replica(single, kind, replicas):
    weights1, history1, final1, _ = single[kind]
    results = allgpu.launch(train, num_replicas=replicas, args=(kind,))
    for weights, history, final, rounds in results:
        assert rounds == 3 * 7  # one all-reduce round per step, not two
        for got, want in zip(weights, weights1):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        assert set(history) == {"loss", "mae", "val_loss", "val_mae"}
        for name, values in history.items():  # reduced across replicas: the one-replica figures
            np.testing.assert_allclose(values, history1[name], rtol=1e-4)
        np.testing.assert_allclose([final["loss"], final["mae"]], [final1["loss"], final1["mae"]], rtol=1e-4)
    for other in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(results[0][0], other[0]))
        assert other[1] == results[0][1] and other[2] == results[0][2]  # identical logs: identical decisions


class CountingCheckpoint(keras.callbacks.ModelCheckpoint):
    saves = 0

    def _save_model(self, *args, **kwargs):
        type(self).saves += 1
        super()._save_model(*args, **kwargs)


def _outside_scope_then_mirror(directory):
    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(strategy.replica_id_in_sync)
    x, y = regression_data()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    try:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
        error = None
    except NotMirroredError as exc:
        error = str(exc)
    model = strategy.mirror(model)
    checkpoint = CountingCheckpoint(os.path.join(directory, "best.weights.h5"), save_weights_only=True,
                                    save_best_only=True, monitor="loss")
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0, verbose=1)  # after epoch 2
    writers = [keras.callbacks.TensorBoard(os.path.join(directory, "logs")),
               keras.callbacks.CSVLogger(os.path.join(directory, "log.csv"))]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # Keras's print_msg writes to sys.stdout
        history = model.fit(x, y, batch_size=BATCH, epochs=6, verbose=0, callbacks=[checkpoint, stop, *writers])
    return (error, [w.copy() for w in model.get_weights()], len(history.history["loss"]), CountingCheckpoint.saves,
            printed.getvalue())


@pytest.mark.timeout(120)
def test_model_built_outside_scope_raises_and_mirror_fixes_it(tmp_path):
    results = allgpu.launch(_outside_scope_then_mirror, num_replicas=2, args=(str(tmp_path),))
    for rank, (error, _, epochs, saves, printed) in enumerate(results):
        assert ("early stopping" in printed) == (rank == 0), printed  # EarlyStopping(verbose=1) says so once
        assert error is not None and "created outside strategy.scope()" in error and "strategy.mirror" in error
        assert epochs == 2                                  # EarlyStopping decided the same on both replicas
        assert (saves > 0) == (rank == 0)                   # only replica 0 writes the checkpoint
    assert all(np.array_equal(a, b) for a, b in zip(results[0][1], results[1][1]))
    assert (tmp_path / "best.weights.h5").exists()
    assert len(list((tmp_path / "logs" / "train").iterdir())) == 1  # one TensorBoard event file: replica 0's
    assert len((tmp_path / "log.csv").read_text().splitlines()) == 1 + 2  # the header and each epoch, once


class Regularised(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(16, activation="relu")
        self.norm = keras.layers.BatchNormalization()
        self.drop = keras.layers.Dropout(0.3)
        self.out = keras.layers.Dense(3)

    def call(self, x, training=False):
        return self.out(self.drop(self.norm(self.dense(x), training=training), training=training))


def _mixed_precision_batchnorm_dropout():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    strategy = allgpu.MirroredStrategy()
    x, _ = regression_data()
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5)
    with strategy.scope():
        model = Regularised()
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(x, y, batch_size=BATCH, epochs=8, verbose=0)
    return history.history, [w.copy() for w in model.get_weights()], model.norm.moving_mean.numpy().copy()


@pytest.mark.timeout(120)
def test_bfloat16_batchnorm_dropout_subclassed_train_and_stay_identical():
    (h0, w0, mean0), (h1, w1, mean1) = allgpu.launch(_mixed_precision_batchnorm_dropout, num_replicas=2)
    assert h0 == h1 and h0["loss"][-1] < h0["loss"][0]
    assert all(np.array_equal(a, b) for a, b in zip(w0, w1))  # moving statistics averaged, so identical too
    assert np.array_equal(mean0, mean1) and np.abs(mean0).sum() > 0


class Counting(Subclassed):
    """Notes the size of each real (not symbolic) batch it is called on."""

    def call(self, x):
        if not isinstance(x, keras.KerasTensor) and str(x.device) != "meta":
            self.sizes.append(int(x.shape[0]))
        return super().call(x)


def _predict():
    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(strategy.replica_id_in_sync)
    x, _ = regression_data()
    with strategy.scope():
        model = Counting()
        model.compile(optimizer="adam", loss="mse")  # compiled, never fit: predict builds it without targets
    model.sizes = []
    predictions = model.predict(x[:103], batch_size=BATCH, verbose=0)  # last global batch of 7: 2 each, padded on 4
    model.sizes.clear()
    on_batch = model.predict_on_batch(x[:7]), model.predict_on_batch(x[10:13])  # 3 < 4 replicas
    return (predictions, *on_batch), list(model.sizes)


@pytest.mark.timeout(120)
def test_predict_returns_every_example_once_in_input_order():
    one, sizes = allgpu.launch(_predict, num_replicas=1)[0]
    assert sizes == [7, 3]
    for replicas, slices in ((2, [[4, 2], [3, 1]]), (4, [[2, 1], [2, 1], [2, 1], [1, 1]])):
        for rank, (got, sizes) in enumerate(allgpu.launch(_predict, num_replicas=replicas)):
            assert sizes == slices[rank]  # predict_on_batch split the global batch (padded past 3 examples)
            assert [g.shape for g in got] == [(103, 1), (7, 1), (3, 1)]
            for g, want in zip(got, one):  # predict and predict_on_batch: the one-replica predictions
                np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def _shuffled(source):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)  # replica 0 draws the shuffle seed and sends it to the others
    x, y = regression_data()
    with strategy.scope():
        model = build("sequential")
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    if source == "dataloader":
        loader = DataLoader(TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=BATCH, shuffle=True)
        model.fit(loader, epochs=2, verbose=0)
    else:
        model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=True, verbose=0)
    return [w.copy() for w in model.get_weights()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", ["arrays", "dataloader"])
def test_shuffled_fit_on_two_replicas_matches_one(source):
    one = allgpu.launch(_shuffled, num_replicas=1, args=(source,))[0]
    for weights in allgpu.launch(_shuffled, num_replicas=2, args=(source,)):
        for got, want in zip(weights, one):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def _on_batch():
    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(strategy.replica_id_in_sync)
    x, y = regression_data()
    with strategy.scope():
        model = build("sequential")   # built lazily by the first train_on_batch
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])
    logs = [model.train_on_batch(x[i:i + 30], y[i:i + 30], return_dict=True) for i in range(0, 120, 30)]
    return [w.copy() for w in model.get_weights()], logs, model.test_on_batch(x[:50], y[:50], return_dict=True)


@pytest.mark.timeout(120)
def test_train_on_batch_splits_the_global_batch():
    weights1, logs1, test1 = allgpu.launch(_on_batch, num_replicas=1)[0]
    for weights, logs, test in allgpu.launch(_on_batch, num_replicas=4):  # 30 = 8 + 8 + 7 + 7
        for got, want in zip(weights, weights1):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        for got, want in zip(logs + [test], logs1 + [test1]):
            np.testing.assert_allclose([got["loss"], got["mae"]], [want["loss"], want["mae"]], rtol=1e-4)


class CountingSaves(keras.Sequential):
    saves = 0

    def save(self, *args, **kwargs):  # Keras's own save: called where the file is really written
        type(self).saves += 1
        return super().save(*args, **kwargs)


class SaveEachEpoch(keras.callbacks.Callback):  # a callback of your own, run on every replica
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        self.model.save(self.path)


def _own_callback_saves(path):
    strategy = allgpu.MirroredStrategy()
    x, y = regression_data()
    with strategy.scope():
        model = CountingSaves([keras.Input((6,)), keras.layers.Dense(64), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[SaveEachEpoch(path)])
    model.evaluate(x, y, batch_size=BATCH, verbose=0)  # a collective: replica 0 stays until replica 1 has waited
    loaded = keras.models.load_model(path, custom_objects={"CountingSaves": CountingSaves})
    return CountingSaves.saves, len(loaded.get_weights())


@pytest.mark.timeout(120)
def test_model_save_in_your_own_callback_is_written_once(tmp_path):
    # before: during fit every replica wrote the same file at once (a corrupt zip: BadZipFile on load_model)
    results = allgpu.launch(_own_callback_saves, num_replicas=2, args=(str(tmp_path / "epoch.keras"),))
    assert [saves for saves, _ in results] == [2, 0]  # replica 0 writes each epoch; replica 1 waits for its file
    assert all(n == 4 for _, n in results)


def _save_as_last_line(path):
    import time

    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])
    if strategy.replica_id_in_sync == 1:
        time.sleep(1.0)  # replica 0 has written the file and returned by the time replica 1 saves
    model.save(path)
    return strategy.replica_id_in_sync


@pytest.mark.timeout(120)
def test_a_function_ending_with_model_save_returns_on_every_replica(tmp_path):
    # before: replica 0 returned and took the job's store with it; replica 1, waiting for replica 0's file, raised
    # ReplicaFailedError "the job's store is gone: replica 0 has exited"
    assert allgpu.launch(_save_as_last_line, num_replicas=2, args=(str(tmp_path / "last.keras"),)) == [0, 1]
    assert keras.models.load_model(tmp_path / "last.keras").get_weights()[0].shape == (6, 1)
