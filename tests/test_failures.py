import re
import time
import warnings

import pytest
import torch

import allgpu
from allgpu.errors import NotMirroredError, ReplicaFailedError, StrategyStartError

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def test_model_built_outside_scope_is_an_error_naming_module_and_fix():
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        with pytest.raises(NotMirroredError) as info:
            model(torch.zeros(2, 3))
        message = str(info.value)
        assert "0.weight" in message and "Sequential" in message and "shape (4, 3)" in message
        assert "with strategy.scope():" in message and "strategy.mirror(model)" in message
        with torch.no_grad():  # evaluation of an unmirrored model trains nothing: no error
            model(torch.zeros(2, 3))
        strategy.mirror(model)
        model(torch.zeros(2, 3)).sum().backward()
        with strategy.scope():
            inside = torch.nn.Linear(3, 1)
        inside(torch.zeros(1, 3)).sum().backward()
        frozen = torch.nn.Linear(3, 3).requires_grad_(False)  # not trainable: nothing to mirror
        frozen(torch.zeros(1, 3))
    finally:
        strategy.close()


def _outside_scope_on_two_replicas():
    strategy = allgpu.MirroredStrategy()
    model = torch.nn.Linear(2, 2)
    model(torch.zeros(1, 2)).sum().backward()


@pytest.mark.timeout(60)
def test_outside_scope_fails_the_multi_replica_run():
    with pytest.raises(ReplicaFailedError, match="created outside strategy.scope()"):
        allgpu.launch(_outside_scope_on_two_replicas, num_replicas=2)


def _replica_one_raises():
    strategy = allgpu.MirroredStrategy(timeout=120)
    if strategy.replica_id_in_sync == 1:
        raise ValueError("boom on replica 1")
    strategy.reduce("sum", 1.0)  # replica 0 waits here for a peer that is gone


@pytest.mark.timeout(60)
def test_a_replica_that_raises_fails_the_run_fast_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(ReplicaFailedError) as info:
        allgpu.launch(_replica_one_raises, num_replicas=2, timeout=120)
    assert time.monotonic() - start < 20  # far below the 120 s collective timeout
    assert info.value.rank == 1
    assert "ValueError: boom on replica 1" in info.value.remote_traceback
    assert "replica 1 raised" in str(info.value)


SCRIPT = """
import sys, torch, allgpu
strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"], timeout=120)
with strategy.scope():
    model = torch.nn.Linear(4, 1)
torch.manual_seed(strategy.replica_id_in_sync)
model(torch.randn(8, 4)).sum().backward()
print(f"replica {strategy.replica_id_in_sync} of {strategy.num_replicas_in_sync} grad {model.weight.grad.sum().item():.6f}", flush=True)
if sys.argv[1:] == ["raise"] and strategy.replica_id_in_sync == 1:
    raise ValueError("boom on replica 1")
strategy.reduce("sum", 1.0)
"""


@pytest.mark.timeout(120)
def test_plain_python_script_starts_its_own_replicas(run_script):
    result = run_script(SCRIPT)
    assert result.returncode == 0, result.stderr
    # Two processes share the pipe and print() writes the newline separately: match, don't split lines.
    found = sorted(re.findall(r"replica (\d) of (\d) grad (-?[\d.]+)", result.stdout))
    assert [(r, n) for r, n, _ in found] == [("0", "2"), ("1", "2")]
    assert found[0][2] == found[1][2]  # gradients averaged


@pytest.mark.timeout(120)
def test_plain_python_script_with_a_failing_replica_exits_fast_with_its_traceback(run_script):
    start = time.monotonic()
    result = run_script(SCRIPT, "raise")
    assert time.monotonic() - start < 30
    assert result.returncode != 0
    assert "ValueError: boom on replica 1" in result.stderr
    assert "replica 1" in result.stderr


def test_fallback_to_one_device_says_why():
    with pytest.warns(RuntimeWarning, match=r"could not start on \['/gpu:0', '/gpu:1', '/gpu:2', '/gpu:3', "
                                            r"'/gpu:4', '/gpu:5', '/gpu:6', '/gpu:7', '/gpu:8'\].*one device"):
        strategy = allgpu.MirroredStrategy(devices=[f"/gpu:{i}" for i in range(9)])
    try:
        assert strategy.num_replicas_in_sync == 1
        assert "not available" in strategy.fallback_reason
    finally:
        strategy.close()


def test_fallback_error_raises():
    with pytest.raises(StrategyStartError, match="allgpu doctor"):
        allgpu.MirroredStrategy(devices=[f"/gpu:{i}" for i in range(9)], fallback="error")
    with pytest.raises(ValueError, match="fallback='sometimes'"):
        allgpu.MirroredStrategy(fallback="sometimes")


def test_bad_device_names_are_not_fallen_back_from():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="'/tpu:0' is not understood"):
            allgpu.MirroredStrategy(devices=["/tpu:0"])


def test_a_second_strategy_in_the_same_process_accepts_its_own_models():
    first = allgpu.MirroredStrategy(num_replicas=1)
    second = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with first.scope():
            a = torch.nn.Linear(2, 1)
        with second.scope():
            b = torch.nn.Linear(2, 1)
        a(torch.zeros(1, 2)).sum().backward()
        b(torch.zeros(1, 2)).sum().backward()
        with pytest.raises(NotMirroredError):
            torch.nn.Linear(2, 1)(torch.zeros(1, 2))
    finally:
        first.close()
        second.close()


def test_a_model_built_in_a_one_device_scope_trains_while_an_earlier_mirrored_strategy_lives():
    # A notebook: a MirroredStrategy cell (one replica here), then a cell switching to OneDeviceStrategy. The first
    # strategy's check is still installed; the model was built in the second's scope, so nothing is wrong.
    first = allgpu.MirroredStrategy(num_replicas=1)
    one = allgpu.OneDeviceStrategy("/cpu:0")
    try:
        with one.scope():
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.zeros(1, 2)).sum().backward()
        optimizer.step()
        with pytest.raises(NotMirroredError):  # built in no scope at all: still the pitfall for the live Mirrored
            torch.nn.Linear(2, 1)(torch.zeros(1, 2))
    finally:
        first.close()
        one.close()


def test_inside_a_test_runner_the_strategy_does_not_re_execute_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
    strategy.close()  # first: a strategy left open would fail the tests after this one in the process
    assert strategy.num_replicas_in_sync == 1
    assert any(re.search("not from a training script.*allgpu.launch", str(w.message)) for w in caught), caught
    with pytest.raises(StrategyStartError, match="allgpu.launch"):
        allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"], fallback="error")
