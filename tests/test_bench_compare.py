"""`allgpu bench --compile`: the compiled comparison says which sides Dynamo really compiled, and adds DDP around a
compiled module, since torch.compile(DDP(model)) captures no graph in torch 2.13 (pytorch/pytorch#140416)."""

import pytest

from allgpu.bench.throughput import DDP_INNER, compare, format_comparisons

pytestmark = pytest.mark.replicas


@pytest.mark.timeout(180)
def test_a_compiled_comparison_counts_the_graphs_each_side_captured():
    row = compare("mlp_1m", replicas=2, steps=3, warmup=1, rounds=1, backend="eager", optimizer_in_backward=False)
    assert row.graphs["allgpu"] >= 1 and row.graphs[DDP_INNER] >= 1  # both really compiled
    assert set(row.ratios) == {"allgpu", DDP_INNER, "allgpu_vs_ddp_inner"}
    assert row.ratios["allgpu_vs_ddp_inner"] > 0
    text = format_comparisons([row])
    assert f"torch.compile(DDP(model)) {row.graphs['ddp']}" in text
    assert ("ran eager" in text) == (row.graphs["ddp"] == 0)
