"""tf.data reading in one process: what a dataset declares, the split per auto-shard policy, the errors."""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")  # before anything imports Keras (TensorFlow may)

import numpy as np
import pytest

from allgpu.errors import InputError, UnsupportedError
from allgpu.keras.tf_data import is_tf_dataset


def test_is_tf_dataset_never_imports_tensorflow():
    assert not is_tf_dataset([1, 2]) and not is_tf_dataset(np.zeros(3))


def test_missing_tensorflow_says_how_to_install(monkeypatch):
    from allgpu.keras.tf_data.runtime import import_tensorflow

    monkeypatch.setitem(sys.modules, "tensorflow", None)  # what `import tensorflow` meets when it is not installed
    with pytest.raises(UnsupportedError, match=r"pip install 'allgpu\[tf\]'"):
        import_tensorflow()


tf = pytest.importorskip("tensorflow")

from allgpu.keras.tf_data.distributed import to_torch  # noqa: E402
from allgpu.keras.tf_data.facts import read_facts  # noqa: E402
from allgpu.keras.tf_data.split import ReplicaStream, may_read_files  # noqa: E402


def _same_everywhere(values, op):  # the all-reduce of replicas that all hold these values
    return [v * 2 for v in values] if op == "sum" else list(values)


def _split(dataset, replicas=2):
    facts = read_facts(dataset)
    return [[b.tolist() for _, b in ReplicaStream(dataset, facts, replicas, r, all_reduce=_same_everywhere).epoch()]
            for r in range(replicas)]


def test_facts_of_the_seed_pipelines():
    x = np.zeros((100, 4), "float32")
    ds = (tf.data.Dataset.from_tensor_slices((x, x[:, 0])).shuffle(10).map(lambda a, b: (a, b),
          num_parallel_calls=tf.data.AUTOTUNE).cache().batch(32).prefetch(tf.data.AUTOTUNE))
    facts = read_facts(ds)
    assert (facts.global_batch_size, facts.cardinality, facts.policy) == (32, 4, "AUTO")
    assert read_facts(ds.repeat()).infinite
    after_map = tf.data.Dataset.from_tensor_slices({"a": x}).batch(8).map(lambda d: d["a"])
    assert read_facts(after_map).global_batch_size is None  # batched, size read from the first batch
    files = tf.data.Dataset.list_files(__file__, shuffle=False).interleave(tf.data.TFRecordDataset).batch(4)
    assert read_facts(files.map(lambda r: r).map(lambda r: r)).global_batch_size is None  # found past list_files


@pytest.mark.parametrize("pipeline", [lambda d: d, lambda d: d.batch(4).unbatch()])
def test_an_unbatched_dataset_is_refused(pipeline):
    with pytest.raises(InputError, match=r"not batched .*\.batch\(global_batch_size\)"):
        read_facts(pipeline(tf.data.Dataset.from_tensor_slices(np.zeros((10, 784), "float32"))))


def test_data_gives_contiguous_slices_and_splits_a_partial_batch_near_equally():
    assert _split(tf.data.Dataset.range(11).batch(4)) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10]]]


def test_off_cuts_each_global_batch_for_every_replica():
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    first, second = _split(tf.data.Dataset.range(8).batch(4).with_options(options))
    assert first == second == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_global_batch_that_does_not_divide_is_refused():
    with pytest.raises(InputError, match=r"batch of 6 .* 4 replicas\. Fix: \.batch\(4\) or \.batch\(8\)"):
        _split(tf.data.Dataset.range(12).batch(6), replicas=4)


def test_in_memory_pipelines_are_not_offered_to_file_sharding():
    assert not may_read_files(tf.data.Dataset.from_tensor_slices(np.zeros(4)).shuffle(2).cache().batch(2))
    assert may_read_files(tf.data.Dataset.from_tensor_slices(["a.tfrecord"]).interleave(tf.data.TFRecordDataset))
    assert may_read_files(tf.data.TFRecordDataset(["a.tfrecord"]).batch(2))


def test_batches_become_torch_tensors_keeping_their_structure():
    import torch

    batch = next(tf.data.Dataset.from_tensor_slices(({"a": np.ones((4, 2), "float32")}, np.arange(4), [b"x"] * 4))
                 .batch(4).as_numpy_iterator())
    (features, labels, names) = to_torch(batch)
    assert isinstance(features["a"], torch.Tensor) and features["a"].shape == (4, 2) and labels.tolist() == [0, 1, 2, 3]
    assert list(names) == [b"x"] * 4  # strings stay NumPy


def test_allgpu_fit_trains_on_a_tf_data_pipeline_and_refuses_torch_only_options():
    import torch

    import allgpu
    from allgpu.errors import ArgumentError

    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x.sum(1) > 0).astype("int64")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=0).batch(16).prefetch(1)
    with strategy.scope():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    history = allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), ds, epochs=3, global_batch_size=16,
                         strategy=strategy, verbose=False)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert len(strategy.distribute_dataset(ds)) == 4
    with pytest.raises(ArgumentError, match=r"shuffle=True.*the pipeline decides"):
        strategy.distribute_dataset(ds, shuffle=True)
    with pytest.raises(ArgumentError, match=r"global_batch_size=32, but .* batched by 16"):
        strategy.distribute_dataset(ds, 32)


def _keras_model(strategy):
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("Keras runs on another backend in this process")
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
    return model


def test_keras_fit_reads_tf_data_and_names_what_a_dataset_cannot_take():
    import allgpu

    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    model = _keras_model(strategy)
    x, y = np.ones((20, 3), "float32"), np.zeros((20, 2), "float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    assert len(model.fit(ds, epochs=2, verbose=0).history["loss"]) == 2
    assert model.predict(ds.map(lambda a, b: a), verbose=0).shape == (20, 2)
    assert len(model.fit(ds.repeat(), epochs=2, steps_per_epoch=5, verbose=0).history["loss"]) == 2
    with pytest.raises(InputError, match=r"infinite .* so fit would never end\. Fix: pass steps_per_epoch="):
        model.fit(ds.repeat(), epochs=1, verbose=0)
    with pytest.raises(InputError, match=r"infinite .* so evaluate would never end\. Fix: pass steps="):
        model.evaluate(ds.repeat(), verbose=0)
    with pytest.raises(InputError, match=r"batch_size=8 cannot be passed with a tf.data.Dataset"):
        model.fit(ds, batch_size=8, verbose=0)
    with pytest.raises(InputError, match=r"validation_split cannot split a tf.data.Dataset"):
        model.fit(ds, validation_split=0.2, verbose=0)


def test_each_pipeline_gets_the_replica_share_of_threads_unless_it_chose_its_own():
    from allgpu.keras.tf_data.runtime import cores_per_replica

    ds = tf.data.Dataset.range(8).batch(4)
    stream = ReplicaStream(ds, read_facts(ds), 1, 0, threads=3)
    assert stream.dataset.options().threading.private_threadpool_size == 3
    options = tf.data.Options()
    options.threading.private_threadpool_size = 5
    own = ds.with_options(options)
    assert ReplicaStream(own, read_facts(own), 1, 0, threads=3).dataset.options().threading.private_threadpool_size == 5
    assert cores_per_replica(10 ** 6) == 1


def test_element_spec_of_distributed_datasets_and_an_unbatched_dataset_at_one_replica():
    import torch

    import allgpu
    from allgpu.core.element_spec import TensorSpec

    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    x, y = np.ones((10, 3), "float32"), np.arange(10)
    exact = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(4, True))
    assert exact.element_spec == (TensorSpec((4, 3), torch.float32), TensorSpec((4,), torch.int64))
    ragged = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices({"x": x}).batch(4))
    assert ragged.element_spec == {"x": TensorSpec((None, 3), torch.float32)}
    data = torch.utils.data.TensorDataset(torch.ones(10, 3), torch.arange(10))
    # the structure the batches have: default_collate makes a TensorDataset's pairs lists
    assert strategy.distribute_dataset(data, 4).element_spec == [TensorSpec((4, 3), torch.float32),
                                                                  TensorSpec((4,), torch.int64)]
    assert strategy.distribute_dataset(data, 4, drop_remainder=False).element_spec[0].shape == (None, 3)
    loader = strategy.distribute_datasets_from_function(lambda ctx: torch.utils.data.DataLoader(data, batch_size=2))
    assert loader.element_spec[1] == TensorSpec((None,), torch.int64)
    # TensorFlow accepts an unbatched dataset at one replica: its elements, as they are
    unbatched = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)))
    assert unbatched.element_spec == (TensorSpec((3,), torch.float32), TensorSpec((), torch.int64))
    first = next(iter(unbatched))
    assert first[0].shape == (3,) and first[1].item() == 0 and len(list(unbatched)) == 10
