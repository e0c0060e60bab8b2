"""FullyShardedStrategy with a model built on the meta device: sharded first, then only the shards materialised
(allgpu/strategies/sharded/meta_init.py). Real Gloo replicas; the bytes a replica holds are counted from outside by a
dispatch mode that sees every tensor torch allocates."""

import weakref

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import allgpu
from allgpu.errors import ShardingError

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


class Block(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.norm = nn.LayerNorm(4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.norm(self.up(x))))


class Net(nn.Module):
    def __init__(self, blocks=8):
        super().__init__()
        self.emb = nn.Embedding(101, 32)  # 101 rows: uneven shards on 2 and 3 replicas
        self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.blocks(self.emb(x)).mean(1))


class LiveBytes(TorchDispatchMode):
    """The most bytes of non-meta tensor storage alive at once among the tensors created while active."""

    def __init__(self):
        super().__init__()
        self.alive: dict[int, tuple[weakref.ref, int]] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                local = t._local_tensor if isinstance(t, DTensor) else t
                if not local.is_meta:
                    storage = local.untyped_storage()
                    self.alive.setdefault(storage.data_ptr(), (weakref.ref(local), storage.nbytes()))
        self.alive = {k: v for k, v in self.alive.items() if v[0]() is not None}
        self.peak = max(self.peak, sum(n for _, n in self.alive.values()))
        return out


def _build(strategy, meta: bool):
    torch.manual_seed(0)
    with strategy.scope():
        if meta:
            with torch.device("meta"):
                model = Net()
        else:
            model = Net()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optimizer


def _train(steps: int):
    strategy = allgpu.FullyShardedStrategy()
    model, optimizer = _build(strategy, meta=True)
    start = {k: v.clone() for k, v in strategy.full_state_dict(model).items()}
    data = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 101, (12, 6), generator=data), torch.randint(0, 5, (12,), generator=data)
    per = 12 // strategy.num_replicas_in_sync
    mine = slice(strategy.replica_id_in_sync * per, (strategy.replica_id_in_sync + 1) * per)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x[mine]), y[mine])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(strategy.reduce("mean", loss.detach())))
    end = {k: v.clone() for k, v in strategy.full_state_dict(model).items()}
    return start, end, losses, strategy.init_full_bytes


@pytest.mark.timeout(120)
def test_a_meta_model_trains_the_same_on_any_replica_count():
    one, three = (allgpu.launch(_train, num_replicas=n, args=(10,))[0] for n in (1, 3))
    start, end, losses, held = one
    assert set(start) == set(three[0]) and all(torch.equal(start[k], three[0][k]) for k in start)  # bitwise
    assert torch.equal(start["blocks.0.norm.weight"], torch.ones(128))  # each module's own reset_parameters ran
    assert torch.equal(start["blocks.0.norm.bias"], torch.zeros(128))
    bound = 1 / 32 ** 0.5  # nn.Linear: kaiming_uniform_(a=sqrt(5)) -> U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert 0.9 * bound < start["blocks.0.up.weight"].abs().max() <= bound
    assert not torch.equal(start["blocks.0.up.weight"], start["blocks.1.up.weight"])  # a seed per module
    assert losses[-1] < 0.5 * losses[0], losses  # it trains
    for k in end:
        torch.testing.assert_close(end[k], three[1][k], rtol=1e-4, atol=1e-5)
    assert held == three[3] == (32 * 128 + 128) * 4  # one Linear(32, 128) in full at most


def _peak(meta: bool):
    strategy = allgpu.FullyShardedStrategy()
    with LiveBytes() as live:
        model, _ = _build(strategy, meta)
    held = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    return live.peak, held, full


@pytest.mark.timeout(120)
def test_a_meta_model_is_never_held_in_full():
    (meta_peak, held, full), _ = allgpu.launch(_peak, num_replicas=2, args=(True,))
    (plain_peak, _, _), _ = allgpu.launch(_peak, num_replicas=2, args=(False,))
    assert plain_peak >= full  # the counter sees a model built in full
    assert held <= full / 2 + 4 * 128  # each replica keeps its half (rows rounded up)
    module = (32 * 128 + 128) * 4  # the largest module, Linear(32, 128)
    assert meta_peak < held + 2 * module, (meta_peak, held, full)  # its shards, padding, one module at a time


class NoReset(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))


def _refused(case: str):
    strategy = allgpu.FullyShardedStrategy()
    try:
        with strategy.scope():
            if case == "mixed":
                plain = nn.Linear(4, 4)
                with torch.device("meta"):
                    model = nn.Sequential(plain, nn.Linear(4, 4))
            else:
                with torch.device("meta"):
                    model = nn.Sequential(nn.Linear(4, 4), NoReset())
        return f"no error for {model}"
    except ShardingError as exc:
        return str(exc)


@pytest.mark.timeout(60)
def test_meta_models_that_cannot_be_initialised_are_refused():
    assert "1 (NoReset)" in allgpu.launch(_refused, num_replicas=1, args=("no-reset",))[0]
    text = allgpu.launch(_refused, num_replicas=1, args=("mixed",))[0]
    assert "some parameters are on the meta device" in text and "Fix:" in text
