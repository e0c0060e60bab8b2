"""``get_strategy``, ``get_replica_context`` and the replica context's collectives (``tf.distribute``'s names).

The collectives are checked with real Gloo replicas against one replica at the same global batch: a SimCLR-style
contrastive loss over embeddings gathered across replicas (google-research/simclr tf2 gathers its negatives with
``tf.distribute.get_replica_context().all_gather``), normalised with moments all-reduced across replicas as a
custom sync batch-norm does, gives the same gradients.
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

GLOBAL_BATCH = 8


def test_outside_any_strategy_the_default_strategy_is_one_replica():
    assert not allgpu.has_strategy() and not allgpu.in_cross_replica_context()
    default = allgpu.get_strategy()
    assert default is allgpu.get_strategy() and default.num_replicas_in_sync == 1
    with default.scope():
        assert not allgpu.has_strategy()  # TensorFlow's default scope() changes nothing
    assert default.run(lambda a, b=0: a + b, args=(2,), kwargs={"b": 3}) == 5
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(default.reduce("sum", x), x)
    assert default.reduce(allgpu.ReduceOp.MEAN, x, axis=0).tolist() == [2.0, 3.0]
    assert torch.equal(default.gather(x, axis=0), x)
    data = [1, 2, 3]
    assert default.experimental_distribute_dataset(data) is data
    context = allgpu.get_replica_context()
    assert (context.replica_id_in_sync_group, context.num_replicas_in_sync) == (0, 1)
    assert context.strategy is default
    assert torch.equal(context.all_gather(x, axis=0), x)
    assert context.all_reduce("sum", 3.0).item() == 3.0
    with pytest.raises(ArgumentError, match="'prod'"):
        context.all_reduce("prod", x)
    with pytest.raises(ArgumentTypeError, match="axis"):
        context.all_gather(x, axis=None)


def test_scope_is_the_cross_replica_context_and_run_the_replica_context():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        assert allgpu.get_strategy() is strategy and allgpu.has_strategy()
        assert allgpu.in_cross_replica_context() and allgpu.get_replica_context() is None

        def step():
            context = allgpu.get_replica_context()
            return (context.strategy, allgpu.in_cross_replica_context(), context.replica_id_in_sync_group,
                    context.all_reduce(allgpu.ReduceOp.SUM, {"a": torch.ones(2)})["a"].tolist())

        assert strategy.run(step) == (strategy, False, 0, [1.0, 1.0])
    assert not allgpu.has_strategy() and allgpu.get_strategy() is not strategy
    assert strategy.run(lambda: allgpu.get_strategy()) is strategy  # run() outside scope(): its replica context


def _contrastive_gradients(strategy) -> list:
    """Gradients of a SimCLR-style loss, each replica holding its slice of a fixed global batch."""
    torch.manual_seed(0)
    views = torch.randn(2, GLOBAL_BATCH, 5)
    with strategy.scope():
        model = torch.nn.Linear(5, 4)
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id_in_sync
    local = GLOBAL_BATCH // n
    x1, x2 = views[:, rank * local:(rank + 1) * local]

    def step(x1, x2):
        context = allgpu.get_replica_context()
        h1, h2 = model(x1), model(x2)
        count = context.all_reduce("sum", torch.tensor(float(len(h1))))  # sync batch-norm: global moments
        mean = context.all_reduce("sum", h1.sum(0)) / count
        var = context.all_reduce(allgpu.ReduceOp.MEAN, ((h1 - mean) ** 2).mean(0))
        h1 = F.normalize((h1 - mean) / (var + 1e-5).sqrt(), dim=1)
        h2 = F.normalize(h2, dim=1)
        negatives = context.all_gather(h2, axis=0)  # (GLOBAL_BATCH, 4): every replica's second view
        labels = torch.arange(len(h1)) + context.replica_id_in_sync_group * len(h1)
        loss = F.cross_entropy(h1 @ negatives.T / 0.5, labels)  # mean over this replica's examples
        loss.backward()
        return negatives.shape

    shape = strategy.run(step, args=(x1, x2))
    assert tuple(shape) == (GLOBAL_BATCH, 4)
    return [p.grad.clone() for p in model.parameters()]


def _two_replicas():
    return _contrastive_gradients(allgpu.MirroredStrategy())


@pytest.mark.replicas
@pytest.mark.timeout(90)
def test_gathered_negatives_and_reduced_moments_train_as_one_replica():
    one = _contrastive_gradients(allgpu.OneDeviceStrategy("/cpu:0"))
    two = allgpu.launch(_two_replicas, num_replicas=2)
    for replica in two:
        for got, want in zip(replica, one):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_fit_and_keras_train_steps_run_in_the_replica_context():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    seen = []

    def loss_fn(outputs, targets):  # a loss that asks for the replica context, as TF code does under fit
        seen.append(allgpu.get_replica_context().all_reduce("sum", 1.0).item())
        return F.mse_loss(outputs, targets)

    with strategy.scope():
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.ones(8, 3), torch.zeros(8, 1))
    allgpu.fit(model, optimizer, loss_fn, data, epochs=1, global_batch_size=4, strategy=strategy, verbose=False,
               num_workers=0)
    assert seen == [1.0, 1.0]
    with strategy.scope():  # no strategy=: the one whose scope is open, as Keras' fit under TF
        allgpu.fit(model, optimizer, lambda out, y: seen.append(allgpu.get_strategy()) or F.mse_loss(out, y), data,
                   epochs=1, global_batch_size=8, verbose=False, num_workers=0)
    assert seen[2:] == [strategy]
    del seen[2:]
    if keras is None or keras.backend.backend() != "torch":
        pytest.skip("Keras is not installed, or runs on another backend in this process")

    def keras_loss(y_true, y_pred):
        seen.append(allgpu.get_replica_context().strategy)
        return keras.ops.mean((y_true - y_pred) ** 2)

    with strategy.scope():
        net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        net.compile(optimizer="sgd", loss=keras_loss)
    net.fit(torch.ones(8, 3).numpy(), torch.zeros(8, 1).numpy(), batch_size=4, epochs=1, verbose=0)
    assert seen[-2:] == [strategy, strategy]  # the two steps (an earlier call may be Keras building its loss)
