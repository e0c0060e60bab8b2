"""``Join`` (uneven inputs) on a mirrored model: a typed error naming the fix, not a bare AttributeError.

Found running pytorch/tutorials' generic_join recipe ported to allgpu (``with Join([model]):``, ``with
Join([model, ZeroRedundancyOptimizer(...)]):`` and DDP's own ``with model.join():``): before, each stopped with
``AttributeError: 'Linear' object has no attribute 'join_hook'`` (or ``'join'``) from ``nn.Module.__getattr__``."""

import io

import pytest
import torch
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer

import allgpu
from allgpu.errors import UnsupportedError

pytestmark = pytest.mark.unit


@pytest.fixture
def strategy():
    s = allgpu.MirroredStrategy(num_replicas=1)
    yield s
    s.close()


def test_join_on_a_mirrored_model_names_the_fix(strategy):
    with strategy.scope():
        model = torch.nn.Linear(1, 1)
        optim = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.01)
    for make in (lambda: Join([model]), lambda: Join([model, optim]), lambda: model.join(),
                 lambda: Join([model], divide_by_initial_world_size=False)):
        with pytest.raises(UnsupportedError, match="distribute_dataset.*drop_remainder=False"):
            make()
    model(torch.ones(1)).sum().backward()  # the model still trains
    optim.step()
    buf = io.BytesIO()
    torch.save(model, buf)  # the refusals are not pickled with the module
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert not any(k in vars(loaded) for k in ("join", "join_hook", "no_sync"))


def test_a_model_with_its_own_join_keeps_it(strategy):
    class Joiner(torch.nn.Linear):
        def join(self):
            return "mine"

    with strategy.scope():
        model = Joiner(1, 1)
    model(torch.ones(1)).sum().backward()
    assert model.join() == "mine"
