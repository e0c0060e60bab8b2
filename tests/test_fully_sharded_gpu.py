"""FullyShardedStrategy on CUDA: bf16 training on cuda:0 and its peak memory against MirroredStrategy.

Skipped without a GPU; run with ``pytest -m gpu tests/test_fully_sharded_gpu.py`` on a GPU machine.
Not yet run anywhere (no GPU machine was available when it was written).
"""

import pytest
import torch

import allgpu
from tests.fsdp_models import TiedNet, make_data

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _train(strategy):
    torch.manual_seed(0)
    with strategy.scope():
        model = TiedNet(width=256, blocks=4)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in strategy.distribute_dataset(make_data(), 32, seed=7, num_workers=0):
        out = model(x)
        torch.nn.functional.cross_entropy(out.float(), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, out


@pytest.mark.timeout(300)
def test_bf16_on_cuda_trains_with_float32_shards():
    strategy = allgpu.FullyShardedStrategy(devices=["/gpu:0"], mixed_precision="bf16")
    model, out = _train(strategy)
    assert out.dtype == torch.bfloat16 and out.device.type == "cuda"
    assert model.embed.weight.dtype == torch.float32 and model.embed.weight.device.type == "cuda"
    assert torch.cuda.max_memory_allocated() > 0
    full = strategy.full_state_dict(model)
    assert all(t.device.type == "cpu" and torch.isfinite(t).all() for t in full.values())
    strategy.close()


@pytest.mark.timeout(600)
def test_bench_memory_on_cuda_reports_peak_memory():
    from allgpu.bench.memory import measure

    rows = measure((), device="cuda", steps=3, warmup=1, rounds=1)
    assert rows[0].cuda_peak and rows[0].cuda_peak >= rows[0].held
