"""torch.compile under FullyShardedStrategy: compiled training equals eager training on 1, 2 and 4 replicas,
Dynamo captures graphs (before, the whole model ran eagerly without a word), and no step but the first breaks a
graph."""

import pytest
import torch

import allgpu
from tests.test_compile import STEPS, _data, _mlp


def _digest_and_worst(eager, compiled) -> tuple[float, str]:
    import hashlib

    worst, parts = 0.0, []
    for want, got in zip(eager.parameters(), compiled.parameters()):
        want, got = want.detach().full_tensor(), got.detach().full_tensor()
        worst = max(worst, float(((want - got).abs() / (want.abs() + 1e-3)).max()))
        parts.append(got.numpy().tobytes())
    return worst, hashlib.sha256(b"".join(parts)).hexdigest()


def _eager_and_compiled(how):
    from torch._dynamo.utils import counters

    strategy = allgpu.FullyShardedStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        eager, twin = _mlp(), _mlp()
        twin.load_state_dict(eager.state_dict())
        opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
        opt_twin = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    counters.clear()
    data = strategy.distribute_dataset(_data(), 16, seed=5, num_workers=0)
    if how == "fit":
        for model, opt in ((twin, opt_twin), (eager, opt_eager)):
            allgpu.fit(model, opt, torch.nn.CrossEntropyLoss(), _data(), epochs=1, global_batch_size=16,
                       strategy=strategy, compile={"backend": "aot_eager"} if model is twin else False,
                       verbose=False)
    else:
        compiled = strategy.compile(twin, backend="aot_eager") if how == "strategy.compile" else \
            torch.compile(twin, backend="aot_eager")
        breaks_after_first = None
        for step, (x, y) in zip(range(STEPS), data):
            for model, opt in ((compiled, opt_twin), (eager, opt_eager)):
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            if step == 0:
                breaks_after_first = sum(counters["graph_break"].values())
        assert sum(counters["graph_break"].values()) == breaks_after_first, dict(counters["graph_break"])
    worst, digest = _digest_and_worst(eager, twin)
    return worst, digest, int(counters["stats"]["unique_graphs"])


CASES = [(1, "torch.compile"), (2, "torch.compile"), (4, "torch.compile"), (2, "strategy.compile"), (2, "fit")]


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("replicas,how", CASES)
def test_compiled_sharded_training_equals_eager(replicas, how):
    results = allgpu.launch(_eager_and_compiled, num_replicas=replicas, args=(how,))
    for worst, _, graphs in results:
        assert worst <= 1e-4
        assert graphs >= 1, "Dynamo captured no graph: the model ran eagerly"
    assert len({digest for _, digest, _ in results}) == 1  # every replica holds the same full parameters
