"""The not-mirrored check on compiled models, in process (one replica, backend aot_eager: no subprocesses)."""

import pytest
import torch
from torch._dynamo.utils import counters

import allgpu
from allgpu.errors import NotMirroredError


@pytest.fixture
def strategy():
    s = allgpu.MirroredStrategy(num_replicas=1)
    torch._dynamo.reset()
    yield s
    s.close()


def _model():
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))


def test_torch_compile_of_a_model_built_outside_scope_names_the_module(strategy):
    compiled = torch.compile(_model(), backend="aot_eager")
    with pytest.raises(NotMirroredError) as info:
        compiled(torch.zeros(2, 3))
    message = str(info.value)
    assert "Sequential.0.weight" in message and "shape (4, 3)" in message and "strategy.mirror(model)" in message


def test_model_compiled_in_place_outside_scope_is_caught_at_the_optimizer_step(strategy):
    model = _model()
    model.compile(backend="aot_eager")  # the whole call, global hooks included, is compiled: no eager hook
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.zeros(2, 3)).sum().backward()
    with pytest.raises(NotMirroredError) as info:
        optimizer.step()
    assert "param_groups[0]['params'][0] of a SGD" in str(info.value) and "shape (4, 3)" in str(info.value)


def test_compiled_mirrored_model_trains_without_graph_breaks_or_recompiles(strategy):
    with strategy.scope():
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="aot_eager")
    counters.clear()
    for _ in range(5):
        compiled(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1  # compiled once, not once per step
    assert strategy.gradient_sync.rounds == 0  # one replica, no accumulation: nothing to all-reduce


def test_the_optimizer_check_is_cached_per_param_group_shape(strategy):
    with strategy.scope():
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.zeros(1, 3)).sum().backward()
    optimizer.step()
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})  # unmirrored, added later
    with pytest.raises(NotMirroredError, match=r"param_groups\[1\]\['params'\]\[0\]"):
        optimizer.step()


def test_strategy_compile_rejects_inductor_options_for_another_backend_and_unknown_backends(strategy):
    with pytest.raises(ValueError, match="inductor's"):
        strategy.compile(_model(), backend="aot_eager", mode="max-autotune")
    with pytest.raises(ValueError, match="unknown"):
        strategy.compile(_model(), backend="no_such_backend")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        strategy.compile(lambda x: x)
