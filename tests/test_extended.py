"""``ReplicaContext.merge_call`` and ``strategy.extended`` (``update``, ``reduce_to``, ``batch_reduce_to``, the
device and chief questions), TensorFlow's names as public training code uses them (``docs/tf_names_usage.md``).

The pattern checked is the one found in that code: an exponential moving average of the weights, and running
statistics of the input, updated inside ``strategy.run`` through ``get_replica_context().merge_call(fn)`` where
``fn(strategy, ...)`` reduces with ``strategy.extended.reduce_to`` / ``batch_reduce_to`` and writes with
``strategy.extended.update``. Two Gloo replicas must end with one replica's values at the same global batch.
"""

import pytest
import torch
import torch.nn.functional as F

import allgpu
from allgpu.errors import ArgumentError, ArgumentTypeError

try:  # imported at collection: importing Keras starts a process (platform's uname), which the unit tier refuses
    import keras
except ImportError:
    keras = None

GLOBAL_BATCH, STEPS, DECAY = 8, 3, 0.5


def _merge_fn(strategy, ema, params, stats, batch):
    assert allgpu.get_replica_context() is None and allgpu.in_cross_replica_context()
    for average, param in zip(ema, params):
        value = strategy.extended.reduce_to(allgpu.ReduceOp.MEAN, param, average)  # identical copies: unchanged
        strategy.extended.update(average, lambda a, v: a.sub_((a - v) * (1 - DECAY)), args=(value,))
    count, total = strategy.extended.batch_reduce_to(
        "sum", [(torch.tensor(len(batch)), stats["count"]), (batch.sum(0), stats["sum"])])
    mean = strategy.extended.reduce_to("mean", batch.mean(0), stats["mean"])  # per replica: different values
    strategy.extended.update(stats["count"], lambda a, v: a.add_(v), args=(count,))
    strategy.extended.update(stats["sum"], torch.Tensor.add_, args=(total,))
    strategy.extended.update(stats["mean"], torch.Tensor.copy_, args=(mean,))
    return count.dtype


def _train(strategy) -> dict:
    torch.manual_seed(0)
    x, y = torch.randn(STEPS * GLOBAL_BATCH, 4), torch.randn(STEPS * GLOBAL_BATCH, 1)
    with strategy.scope():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    stats = {"count": torch.zeros((), dtype=torch.int64), "sum": torch.zeros(4), "mean": torch.zeros(4)}
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id_in_sync
    local = GLOBAL_BATCH // n

    def step(xb, yb):
        optimizer.zero_grad()
        F.mse_loss(model(xb), yb).backward()
        optimizer.step()
        dtype = allgpu.get_replica_context().merge_call(_merge_fn, args=(ema, params, stats), kwargs={"batch": xb})
        assert not allgpu.in_cross_replica_context()  # back in the replica context
        return dtype

    for s in range(STEPS):
        rows = slice(s * GLOBAL_BATCH + rank * local, s * GLOBAL_BATCH + (rank + 1) * local)
        assert strategy.run(step, args=(x[rows], y[rows])) == torch.int64
    return {"ema": ema, "params": [p.detach().clone() for p in params], **stats,
            "devices": strategy.extended.worker_devices, "summary": strategy.extended.should_save_summary}


def _two_replicas():
    return _train(allgpu.MirroredStrategy())


@pytest.mark.replicas
@pytest.mark.timeout(90)
def test_merge_call_ema_and_running_statistics_match_one_replica():
    one = _train(allgpu.OneDeviceStrategy("/cpu:0"))
    two = allgpu.launch(_two_replicas, num_replicas=2)
    assert one["count"].item() == STEPS * GLOBAL_BATCH
    for rank, replica in enumerate(two):
        for key in ("ema", "params"):
            for got, want in zip(replica[key], one[key]):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for key in ("count", "sum", "mean"):
            torch.testing.assert_close(replica[key], one[key], rtol=1e-5, atol=1e-6)
        assert replica["devices"] == (f"/job:worker/replica:0/task:{rank}/device:CPU:0",)
        assert replica["summary"] == (rank == 0)


def test_default_strategy_merge_call_is_cross_replica_without_a_strategy():
    context = allgpu.get_replica_context()

    def merge_fn(strategy, value, scale=1):
        assert allgpu.in_cross_replica_context() and not allgpu.has_strategy()
        assert allgpu.get_replica_context() is None and allgpu.get_strategy() is strategy
        reduced = strategy.extended.reduce_to("sum", value, None)
        return strategy.extended.update(torch.zeros(2), torch.Tensor.add_, args=(reduced * scale,))

    assert context.merge_call(merge_fn, args=(torch.ones(2),), kwargs={"scale": 3}).tolist() == [3.0, 3.0]
    assert not allgpu.in_cross_replica_context()
    assert allgpu.get_strategy().extended.should_checkpoint


def test_extended_on_one_replica_and_its_errors():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    extended = strategy.extended
    assert extended.worker_devices == extended.parameter_devices == ("/job:worker/replica:0/task:0/device:CPU:0",)
    assert extended.should_checkpoint and extended.should_save_summary
    param = torch.nn.Parameter(torch.ones(2))
    extended.update(param, torch.Tensor.mul_, args=(2.0,))  # in place on a leaf that requires grad: autograd off
    assert param.tolist() == [2.0, 2.0]
    got = extended.batch_reduce_to("mean", [(torch.tensor([1, 2]), None), (torch.ones(2, 2), None), (3.0, None)])
    assert [t.tolist() for t in got] == [[1.0, 2.0], [[1.0, 1.0], [1.0, 1.0]], 3.0]
    assert strategy.run(lambda: extended.call_for_each_replica(lambda a: a + 1, args=(1,))) == 2
    with pytest.raises(ArgumentError, match="'prod'"):
        extended.reduce_to("prod", 1.0, None)
    with pytest.raises(ArgumentTypeError, match="pair"):
        extended.batch_reduce_to("sum", [torch.ones(1)])
    with pytest.raises(ArgumentTypeError, match="trailing comma"):
        extended.update(param, torch.Tensor.add_, args=1.0)
    with pytest.raises(ArgumentTypeError, match="callable"):
        strategy.replica_context().merge_call("fn")
    with pytest.raises(ArgumentTypeError, match="Keras variables"):
        extended.reduce_to("sum", object(), None)


def test_input_options_are_refused_by_name_and_none_is_accepted():
    from allgpu.errors import UnsupportedError

    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    data = torch.utils.data.TensorDataset(torch.ones(4, 2))
    assert len(list(strategy.experimental_distribute_dataset(data, 2, options=None, num_workers=0))) == 2
    with pytest.raises(UnsupportedError, match="remove options="):
        strategy.experimental_distribute_dataset(data, 2, options=object())


def test_keras_variables_go_through_reduce_to_and_update():
    if keras is None or keras.backend.backend() != "torch":
        pytest.skip("Keras is not installed, or runs on another backend in this process")
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    average, weight = keras.Variable([1.0, 3.0]), keras.Variable([3.0, 5.0])

    def merge_fn(strategy, average, weight):  # fixmatch's EMA update, written with Keras variables
        value = strategy.extended.reduce_to(allgpu.ReduceOp.MEAN, weight, average)
        strategy.extended.update(average, lambda a, v: a.assign_sub((a - v) * 0.5), args=(value,))

    strategy.run(lambda: allgpu.get_replica_context().merge_call(merge_fn, args=(average, weight)))
    assert keras.ops.convert_to_numpy(average).tolist() == [2.0, 4.0]
