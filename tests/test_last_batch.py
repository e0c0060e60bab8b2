"""Issue 24, item 2: an exact last batch. A short last global batch is split unevenly (a replica may get fewer
examples or none, and still joins the all-reduce) and each replica's gradient counts by its share, so N replicas
equal one replica at the same global batch, through distribute_dataset(drop_remainder=False) and a user's
DataLoader(drop_last=False), in a loop and through fit; evaluate counts each example once. 1, 2, 3 and 4 replicas; sizes leaving 1, N-1 and 0
examples over a global batch of 12; one launch per replica count."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import allgpu

BATCH = 12


def _data(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 3, generator=g)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(n, 1, generator=g))


def target_mean(outputs, targets):
    return targets.sum(), targets.shape[0]


def _train(strategy, n, form):
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = _data(n)
    source = DataLoader(data, batch_size=BATCH, shuffle=True) if form in ("loader", "fit") else data
    kwargs = {} if form == "loader" else {"global_batch_size": BATCH, "drop_remainder": False}
    if form == "fit":  # fit keeps a DataLoader's drop_last=False
        allgpu.fit(model, optimizer, torch.nn.functional.mse_loss, source, epochs=2, global_batch_size=BATCH,
                   strategy=strategy, num_workers=0, verbose=0, metrics=())
    for _ in range(2 if form != "fit" else 0):
        for x, y in strategy.distribute_dataset(source, num_workers=0, **kwargs):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    metric = allgpu.evaluate(model, torch.nn.functional.mse_loss, data, global_batch_size=BATCH, strategy=strategy,
                             metrics=[target_mean])
    return torch.cat([model.weight.detach().reshape(-1), model.bias.detach()]), metric


def _cases(n_replicas):
    return [(n, form) for n in (2 * BATCH + 1, 2 * BATCH + n_replicas - 1, 2 * BATCH) for form in ("dataset", "loader", "fit")]


def _all_cases(n_replicas):
    strategy = allgpu.MirroredStrategy() if n_replicas > 1 else allgpu.OneDeviceStrategy("/cpu:0")
    try:
        return [_train(strategy, n, form) for n, form in _cases(n_replicas)]
    finally:
        if n_replicas > 1:
            strategy.close()


def _repro(strategy):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(69, 4, generator=g), torch.randn(69, 1, generator=g)
    with strategy.scope():
        model = torch.nn.Linear(4, 1, bias=False)
        torch.nn.init.constant_(model.weight, 0.0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for xb, yb in strategy.distribute_dataset((x, y), 64, drop_remainder=False, shuffle=False, num_workers=0):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    return model.weight.detach().clone()


def _repro_two():
    strategy = allgpu.MirroredStrategy()
    try:
        return _repro(strategy)
    finally:
        strategy.close()


@pytest.mark.replicas
@pytest.mark.timeout(240)
@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_n_replicas_equal_one_with_a_short_last_batch(replicas):
    one = allgpu.OneDeviceStrategy("/cpu:0")
    reference = [_train(one, n, form) for n, form in _cases(replicas)]
    results = allgpu.launch(_all_cases, args=(replicas,), num_replicas=replicas)
    for case, (params, metric), (ref_params, ref_metric) in zip(_cases(replicas), results[0], reference):
        torch.testing.assert_close(params, ref_params, rtol=1e-5, atol=1e-6, msg=f"{case} on {replicas} replicas")
        for name in ("loss", "target_mean"):  # each example once: the one-replica means
            assert abs(metric[name] - ref_metric[name]) < 1e-5, (case, name, metric, ref_metric)
    for rank in range(1, replicas):  # identical on every replica
        for (a, _), (b, _) in zip(results[0], results[rank]):
            assert torch.equal(a, b)


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_the_issue_repro_69_examples_at_batch_64_agree_on_1_and_2_replicas():
    one = _repro(allgpu.OneDeviceStrategy("/cpu:0"))
    two = allgpu.launch(_repro_two, num_replicas=2)
    torch.testing.assert_close(two[0], one, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(two[1], one, rtol=1e-6, atol=1e-7)
