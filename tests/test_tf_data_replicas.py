"""tf.data input on real Gloo replicas: Keras fit/evaluate/predict and the strategy's datasets on 1, 2 and 4
replicas equal one replica at the same global batch; the auto-shard policies split as tf.distribute does."""

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np
import pytest

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import allgpu  # noqa: E402

pytestmark = pytest.mark.replicas
EXAMPLES, BATCH = 209, 32  # the last global batch has 17 examples: uneven on 2 (9, 8) and 4 (5, 4, 4, 4)
LAST = EXAMPLES % BATCH


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(EXAMPLES, 6)).astype("float32")
    return x, np.tanh(x @ rng.normal(size=(6, 1))).astype("float32")


def _keras_part(strategy, tf):
    x, y = _data()
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=3)
          .map(lambda a, b: (a * 0.5, b), num_parallel_calls=tf.data.AUTOTUNE).cache().batch(BATCH)
          .prefetch(tf.data.AUTOTUNE))
    with strategy.scope():  # built, compiled and trained in the scope, as the seeds do
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])
        history = model.fit(ds, epochs=3, verbose=0, validation_data=ds.take(2))
        final = model.evaluate(ds, verbose=0, return_dict=True)
        predicted = model.predict(tf.data.Dataset.from_tensor_slices(x).batch(40), verbose=0)  # last batch: 9
    return {"weights": [w.copy() for w in model.get_weights()], "history": history.history, "final": final,
            "predicted": predicted}


def _loop_part(strategy, tf):
    import torch

    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": y}).batch(BATCH)  # the short last batch is split unevenly
    n = strategy.num_replicas_in_sync
    with strategy.scope():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(batch):
        assert isinstance(batch, dict) and isinstance(batch["x"], torch.Tensor)
        assert batch["x"].shape[0] in (BATCH // n, -(-LAST // n), LAST // n) and batch["x"].shape[1:] == (6,)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(batch["x"]), batch["y"]).backward()
        opt.step()

    with strategy.scope():  # a custom loop inside the scope, as TensorFlow's guides write it
        for _ in range(2):
            for batch in strategy.experimental_distribute_dataset(ds):
                strategy.run(step, args=(batch,))

    def dataset_fn(context):  # TensorFlow's pattern: shard by element, batch per replica
        per = context.get_per_replica_batch_size(BATCH)
        return (tf.data.Dataset.from_tensor_slices({"x": x, "y": y})
                .shard(context.num_input_pipelines, context.input_pipeline_id).batch(per, drop_remainder=True))

    for batch in strategy.distribute_datasets_from_function(dataset_fn):
        strategy.run(step, args=(batch,))

    def tf_style_step(batch):  # TensorFlow's loss spelling: per-example losses over the global batch
        opt.zero_grad()
        per_example = (net(batch["x"]) - batch["y"]).square().mean(1)
        allgpu.compute_average_loss(per_example, global_batch_size=BATCH).backward()
        opt.step()

    for batch in strategy.experimental_distribute_dataset(ds):  # the short last batch too
        strategy.run(tf_style_step, args=(batch,))
    return [p.detach().numpy().copy() for p in net.parameters()]


def _policy(tf, dataset, name):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, name)
    return dataset.with_options(options)


def _values(strategy, dataset):
    return [b.numpy().tolist() for b in strategy.experimental_distribute_dataset(dataset)]


def _error(fn):
    try:
        fn()
    except allgpu.errors.InputError as exc:
        return str(exc)
    return None


def _policies_part(strategy, tf, folder):
    numbers = tf.data.Dataset.range(16).batch(8)
    files = tf.data.Dataset.list_files(os.path.join(folder, "even", "*.tfrecord"), shuffle=False)
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=1).map(
        lambda r: tf.strings.to_number(r, tf.int64)).batch(4)
    uneven = tf.data.Dataset.list_files(os.path.join(folder, "uneven", "*.tfrecord"), shuffle=False).interleave(
        tf.data.TFRecordDataset, cycle_length=1).batch(4)
    infinite = strategy.experimental_distribute_dataset(numbers.repeat())
    own = tf.data.Dataset.range(16).map(lambda v: v + strategy.replica_id_in_sync).batch(8)  # differs per replica
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _values(strategy, own)
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    pairs = _policy(tf, uneven.map(lambda r: tf.strings.to_number(r, tf.float32)[:, None] / 300.0)
                    .map(lambda v: (v, 2 * v)), "FILE")
    history = model.fit(pairs, epochs=2, verbose=0)  # replicas' files hold 12 and 6 records: no one waits
    return {
        "keras on uneven files": len(history.history["loss"]),
        "different data warned": any("different first global batches" in str(w.message) for w in caught),
        "DATA": _values(strategy, _policy(tf, numbers, "DATA")),
        "AUTO slices": _values(strategy, numbers),
        "OFF": _values(strategy, _policy(tf, numbers, "OFF")),
        "FILE": _values(strategy, _policy(tf, records, "FILE")),
        "AUTO files": _values(strategy, records),
        "FILE, batch size not static": _values(strategy, _policy(tf, records.map(lambda v: v * 1), "FILE")),
        "uneven files steps": len(list(strategy.experimental_distribute_dataset(_policy(tf, uneven, "FILE")))),
        "infinite first": [b.numpy().tolist() for b, _ in zip(infinite, range(3))],
        "FILE without files": _error(lambda: _values(strategy, _policy(tf, numbers, "FILE"))),
        "indivisible": _error(lambda: _values(strategy, tf.data.Dataset.range(14).batch(7))),
        "unbatched": _error(lambda: _values(strategy, tf.data.Dataset.range(4))),  # fine at one replica only
        "element_spec": [strategy.experimental_distribute_dataset(d).element_spec[0].shape for d in (
            tf.data.Dataset.range(16).batch(8, drop_remainder=True).map(lambda v: (v, v)), numbers.map(lambda v: (v,)))],
    }


def train(folder):
    import tensorflow as tf

    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    result = {"keras": _keras_part(strategy, tf), "loop": _loop_part(strategy, tf)}
    if strategy.num_replicas_in_sync == 2:
        result["policies"] = _policies_part(strategy, tf, folder)
    return result


def _write_records(folder):
    import tensorflow as tf

    for kind, sizes in (("even", [6, 6, 6, 6]), ("uneven", [6, 6, 6])):
        os.makedirs(folder / kind)
        for i, size in enumerate(sizes):
            with tf.io.TFRecordWriter(str(folder / kind / f"part{i}.tfrecord")) as writer:
                for j in range(size):
                    writer.write(str(100 * i + j).encode())


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("records")
    _write_records(folder)
    return str(folder)


@pytest.fixture(scope="module")
def single(records):
    return allgpu.launch(train, num_replicas=1, args=(records,))[0]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("replicas", [2, 4])
def test_tf_data_on_replicas_equals_one_replica(single, records, replicas):
    results = allgpu.launch(train, num_replicas=replicas, args=(records,))
    for result in results:
        for got, want in zip(result["keras"]["weights"], single["keras"]["weights"]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        for name, values in result["keras"]["history"].items():
            np.testing.assert_allclose(values, single["keras"]["history"][name], rtol=1e-4)
        for name, value in result["keras"]["final"].items():
            np.testing.assert_allclose(value, single["keras"]["final"][name], rtol=1e-4)
        np.testing.assert_allclose(result["keras"]["predicted"], single["keras"]["predicted"], rtol=1e-4, atol=1e-6)
        for got, want in zip(result["loop"], single["loop"]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    if replicas == 2:
        _check_policies([r["policies"] for r in results])


def _check_policies(per_replica):
    first, second = per_replica
    # DATA (and AUTO on a pipeline that reads no files): each replica its contiguous half of each global batch
    assert first["DATA"] == first["AUTO slices"] == [[0, 1, 2, 3], [8, 9, 10, 11]]
    assert second["DATA"] == second["AUTO slices"] == [[4, 5, 6, 7], [12, 13, 14, 15]]
    # OFF: no sharding: every replica reads everything, each global batch cut into per-replica batches
    assert first["OFF"] == second["OFF"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    # element_spec: this replica's share of the global batch, None where the last batch may be short
    assert first["element_spec"] == second["element_spec"] == [(4,), (None,)]
    assert "not batched" in first["unbatched"]
    # FILE (and AUTO on files): replica r reads files r, r + 2, in batches of 4 / 2
    for r in per_replica:
        assert r["FILE"] == r["AUTO files"] == r["FILE, batch size not static"]
    assert {v // 100 for b in first["FILE"] for v in b} == {0, 2} and {v // 100 for b in second["FILE"] for v in b} == {1, 3}
    assert all(len(b) == 2 for r in per_replica for b in r["FILE"])
    assert sorted(v for r in per_replica for b in r["FILE"] for v in b) == [100 * i + j for i in range(4) for j in range(6)]
    # files giving replica 0 twelve records and replica 1 six: both stop after 3 steps, neither waits
    assert first["uneven files steps"] == second["uneven files steps"] == 3
    assert first["infinite first"] == [[0, 1, 2, 3], [8, 9, 10, 11], [0, 1, 2, 3]]
    assert first["keras on uneven files"] == second["keras on uneven files"] == 2
    assert first["different data warned"] and not second["different data warned"]  # said once, by replica 0
    for r in per_replica:
        assert "AutoShardPolicy.FILE cannot shard" in r["FILE without files"] and "Fix:" in r["FILE without files"]
        assert "batch of 7" in r["indivisible"] and ".batch(6)" in r["indivisible"]
