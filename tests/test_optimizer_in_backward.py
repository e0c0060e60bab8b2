"""Optimizer-in-backward trains the same parameters as the ordinary step, on 1 and 2 replicas, through fit."""

import hashlib

import pytest
import torch
from torch.utils.data import TensorDataset

import allgpu
from allgpu.errors import UnsupportedError
from allgpu.train import fit


def _data(n=128, seed=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def _fit(optimizer_name, in_backward, accumulation, compile_):
    strategy = allgpu.MirroredStrategy(bucket_cap_mb=0.0001)  # several buckets: several partial steps
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                    torch.nn.ReLU(), torch.nn.Linear(64, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2) if optimizer_name == "adam" else \
            torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    class Schedule(allgpu.train.Callback):
        def on_epoch_end(self, epoch, logs):
            scheduler.step()  # an LR scheduler on the user's optimizer still takes effect

    fit(model, optimizer, torch.nn.CrossEntropyLoss(), _data(), epochs=2, global_batch_size=16, strategy=strategy,
        verbose=False, num_workers=0, accumulation_steps=accumulation, optimizer_in_backward=in_backward,
        callbacks=[Schedule()], compile={"backend": "aot_eager"} if compile_ else False)
    stepper_steps = strategy.gradient_sync.stepper  # turned off again after fit
    params = [p.detach().clone() for p in model.parameters()]
    digest = hashlib.sha256(b"".join(p.numpy().tobytes() for p in params)).hexdigest()
    return [p.tolist() for p in params[-2:]], digest, stepper_steps, len(strategy.gradient_sync.buckets)


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("optimizer_name,accumulation,compile_", [("sgd", 1, False), ("adam", 1, False),
                                                                   ("adam", 2, False), ("sgd", 1, True)])
def test_optimizer_in_backward_equals_the_ordinary_step(replicas, optimizer_name, accumulation, compile_):
    ordinary = allgpu.launch(_fit, num_replicas=replicas, args=(optimizer_name, False, accumulation, compile_))
    inside = allgpu.launch(_fit, num_replicas=replicas, args=(optimizer_name, True, accumulation, compile_))
    assert inside[0][3] >= 3  # the parameters were stepped in several bucket-sized pieces
    for got, want in zip(inside[0][0], ordinary[0][0]):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-6)
    assert len({r[1] for r in inside}) == 1  # replicas identical
    assert inside[0][2] is None  # fit turned it off again


def test_bad_uses_are_refused_and_one_device_steps_inside_backward():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = torch.nn.Linear(2, 1)
    outside = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="not created in strategy.scope"):
        strategy.optimizer_in_backward(torch.optim.SGD(outside.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="LBFGS"):
        strategy.optimizer_in_backward(torch.optim.LBFGS(model.parameters()))
    stepper = strategy.optimizer_in_backward(torch.optim.SGD(model.parameters(), lr=0.1))
    before = model.weight.detach().clone()
    model(torch.ones(1, 2)).sum().backward()  # one device: the step still happens inside backward
    assert stepper.steps == 1 and not torch.equal(model.weight, before)
    strategy.optimizer_in_backward(None)
    central = allgpu.CentralStorageStrategy(num_replicas=1)
    try:
        with central.scope():
            other = torch.nn.Linear(2, 1)
        with pytest.raises(UnsupportedError, match="central copy"):
            central.optimizer_in_backward(torch.optim.SGD(other.parameters(), lr=0.1))
    finally:
        central.close()
