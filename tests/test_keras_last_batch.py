"""Issue 24, item 2 on the Keras adapter: a last global batch smaller than the replica count (33 examples at batch
8 leave 1) gives the replicas past its end a repeated example to run; its gradient counts zero, so 4 replicas
train as one, and it counts in no metric, so ``evaluate``, ``fit``'s validation and ``test_on_batch`` report what
one replica reports, training loss and metrics included, also when a callback evaluates during fit."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import allgpu  # noqa: E402

keras = pytest.importorskip("keras")


def _train():
    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(33, 6)).astype("float32")
    y = (x @ rng.normal(size=(6, 1))).astype("float32")
    with strategy.scope():
        inputs = keras.Input((6,))
        model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])

    class Holdout(keras.callbacks.Callback):  # evaluates during fit (keras-io's callbacks guide shape)
        def on_epoch_end(self, epoch, logs=None):
            logs["holdout_mae"] = self.model.evaluate(x[3:23], y[3:23], batch_size=20, verbose=0,
                                                      return_dict=True)["mae"]

    history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0, validation_data=(x[:17], y[:17]),
                        callbacks=[Holdout()])
    scores = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    tiny = model.test_on_batch(x[:3], y[:3], return_dict=True)  # 3 examples on 4 replicas
    return [w.copy() for w in model.get_weights()], history.history, scores, tiny


@pytest.mark.replicas
@pytest.mark.timeout(300)
def test_a_last_batch_smaller_than_the_replica_count_trains_as_one_replica():
    one, one_history, one_scores, one_tiny = allgpu.launch(_train, num_replicas=1)[0]
    for weights, history, scores, tiny in allgpu.launch(_train, num_replicas=4):
        for got, want in zip(weights, one):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        # training loss and metrics too: the repeated example counted in them (found with keras-io's shapes on 2
        # replicas), and a callback's evaluate left fit's validation reading its own batches' sizes
        assert history.keys() == one_history.keys()
        for key in one_history:
            np.testing.assert_allclose(history[key], one_history[key], rtol=1e-5, err_msg=key)
        for got, want in ((scores, one_scores), (tiny, one_tiny)):
            assert got.keys() == want.keys()
            for key in want:
                np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
