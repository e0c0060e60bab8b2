"""`allgpu bench --compile`: the compiled comparison says which sides Dynamo really compiled, and adds DDP around a
compiled module, since torch.compile(DDP(model)) captures no graph in torch 2.13 (pytorch/pytorch#140416).

Run in a fresh interpreter: the comparison forks its replicas, and a test process that already compiled (Dynamo and
inductor state, worker threads) must not be what they fork from."""

import json

import pytest

from tests.harness import run_python

pytestmark = pytest.mark.replicas

CODE = """
import json
from allgpu.bench.throughput import compare, format_comparisons
row = compare("mlp_1m", replicas=2, steps=3, warmup=1, rounds=1, backend="eager", optimizer_in_backward=False)
print(json.dumps({"graphs": row.graphs, "ratios": row.ratios, "text": format_comparisons([row])}))
"""


@pytest.mark.timeout(180)
def test_a_compiled_comparison_counts_the_graphs_each_side_captured():
    done = run_python(["-c", CODE], timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    graphs, ratios, text = row["graphs"], row["ratios"], row["text"]
    assert graphs["allgpu"] >= 1 and graphs["ddp_inner"] >= 1  # both really compiled
    assert set(ratios) == {"allgpu", "ddp_inner", "allgpu_vs_ddp_inner"}
    assert ratios["allgpu_vs_ddp_inner"] > 0
    assert f"torch.compile(DDP(model)) {graphs['ddp']}" in text
    assert ("ran eager" in text) == (graphs["ddp"] == 0)
