"""Keras metrics made in ``strategy.scope()`` and updated inside ``strategy.run`` (TensorFlow's custom-training
tutorial): ``result()`` read after the loop covers every replica's examples, as ``tf.distribute``'s sync-on-read
metric variables do, and equals one replica's; inside ``run`` it is the replica's own; each replica keeps its own
counts. Metric objects compiled into a model are not counted twice by ``evaluate``."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import allgpu  # noqa: E402

keras = pytest.importorskip("keras")
pytestmark = pytest.mark.replicas


def _custom_loop():
    import torch

    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.normal(size=(64, 6)), dtype=torch.float32)
    y = torch.tensor(rng.integers(0, 4, size=64))
    dataset = strategy.experimental_distribute_dataset(
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16))
    with strategy.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        loss = keras.metrics.Mean(name="test_loss")
        compiled = keras.metrics.SparseCategoricalAccuracy(name="compiled_accuracy")
        probe = keras.metrics.Sum(name="probe")
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=[compiled])
    inside = []

    def step(inputs, labels):
        logits = model(inputs)
        accuracy.update_state(labels, logits)
        loss.update_state(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        probe.update_state(strategy.replica_id_in_sync + 1.0)
        inside.append(float(probe.result()))  # replica context: this replica's own sum

    for inputs, labels in dataset:
        strategy.run(step, args=(inputs, labels))
    local = float(accuracy.count)
    scores = model.evaluate(x.numpy(), y.numpy(), batch_size=16, verbose=0, return_dict=True)
    return {"accuracy": float(accuracy.result()), "loss": float(loss.result()), "count": local,
            "count after read": float(accuracy.count), "inside": inside, "probe": float(probe.result()),
            "evaluate": scores,
            "replicas": strategy.num_replicas_in_sync}


@pytest.mark.timeout(300)
def test_metrics_updated_in_run_read_across_replicas_equal_one_replica():
    one = allgpu.launch(_custom_loop, num_replicas=1)[0]
    two = allgpu.launch(_custom_loop, num_replicas=2)
    assert one["count"] == 64
    for result in two:
        assert result["accuracy"] == pytest.approx(one["accuracy"], rel=1e-6)
        assert result["loss"] == pytest.approx(one["loss"], rel=1e-5)
        assert result["count"] == result["count after read"] == 32  # each replica's own half, restored
        for key, value in one["evaluate"].items():
            assert result["evaluate"][key] == pytest.approx(value, rel=1e-5), key
    for rank, result in enumerate(two):
        assert result["inside"] == [(rank + 1.0) * (step + 1) for step in range(4)]  # 4 steps of 8 examples
        assert result["probe"] == 4 * 1.0 + 4 * 2.0  # outside run: both replicas' sums
