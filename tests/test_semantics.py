"""Issue 10, items 6-8: TF's loss spelling, unused parameters and buffers, a second strategy."""

import textwrap

import pytest
import torch

import allgpu
from allgpu.errors import StrategyStartError

GLOBAL = 16


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, generator=g)
    return x, (x[:, 0] > 0).long()


def _tf_style_training(steps=5):
    """TensorFlow's custom-training tutorial, in allgpu: per-example loss, compute_average_loss, SGD."""
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Linear(5, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = _data()
    data = strategy.distribute_dataset(torch.utils.data.TensorDataset(x, y), GLOBAL, num_workers=0, shuffle=False)
    values = []
    for step, (xb, yb) in enumerate(data):
        if step == steps:
            break
        per_example = torch.nn.functional.cross_entropy(model(xb), yb, reduction="none")
        loss = allgpu.compute_average_loss(per_example, global_batch_size=GLOBAL)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        values.append(float(strategy.reduce("sum", loss.detach())))
    return [p.detach().clone() for p in model.parameters()], values


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_compute_average_loss_gives_one_device_gradients_at_every_replica_count():
    one_params, one_values = _tf_style_training()
    for n in (2, 4):
        for params, values in allgpu.launch(_tf_style_training, num_replicas=n):
            for a, b in zip(params, one_params):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            # The value is TF's: reduce("sum") over replicas is the global-batch mean.
            assert values == pytest.approx(one_values, rel=1e-5)


def test_compute_average_loss_value_and_arguments():
    per = torch.tensor([1.0, 2.0, 3.0, 4.0])
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    assert allgpu.compute_average_loss(per, 8, strategy=strategy).item() == pytest.approx(10 / 8)
    assert allgpu.compute_average_loss(per, strategy=strategy).item() == pytest.approx(10 / 4)
    assert allgpu.compute_average_loss(per, 8, sample_weight=0.5, strategy=strategy).item() == pytest.approx(5 / 8)
    with pytest.raises(ValueError, match="global_batch_size=0"):
        allgpu.compute_average_loss(per, 0)


def test_run_documents_the_loss_convention():
    doc = allgpu.Strategy.run.__doc__
    assert "averaged" in doc and "compute_average_loss" in doc


SECOND = """
import sys, torch, allgpu
first = allgpu.MirroredStrategy(num_replicas=2, timeout=60)
print("first", first.num_replicas_in_sync, flush=True)
same = allgpu.MirroredStrategy()
print("same", same.num_replicas_in_sync, flush=True)
allgpu.MirroredStrategy(num_replicas=int(sys.argv[1]))
"""


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_a_second_strategy_with_another_count_raises_naming_the_first(run_script):
    result = run_script(SECOND, "4", timeout=90)
    assert result.returncode != 0
    assert "StrategyStartError" in result.stderr
    assert "asks for 4 replicas" in result.stderr and "MirroredStrategy with 2 replicas" in result.stderr
    assert "script.py:3" in result.stderr  # where the first was created
    assert result.stdout.count("same 2") == 2  # a second one without a count joins the first


def test_a_second_multi_replica_strategy_after_a_single_one_raises():
    first = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with pytest.raises(StrategyStartError, match=r"asks for 2 replicas.*MirroredStrategy with 1 replica "):
            allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
    finally:
        first.close()
    # Once closed, a new one may have its own count (here it falls back: pytest is not a script).
    with pytest.warns(RuntimeWarning):
        allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"]).close()
