"""torch.compile under every strategy: compiled training equals eager training, all-reduce still overlaps the
compiled backward, and the not-mirrored check works on compiled models without graph breaks."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import TensorDataset

import allgpu
from allgpu.errors import NotMirroredError

STEPS = 6
# 1 MiB buckets (DDP's first-bucket size, the smallest Dynamo's graph splitter takes): this 2.1 MB model has three.
BUCKET_MB = 1


def _data(n=96, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=g)
    return TensorDataset(x, (x[:, :3].sum(1) > 0).long())


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(12, 512), torch.nn.Tanh(), torch.nn.Linear(512, 512), torch.nn.Tanh(),
                               torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 2))


def _strategy(kind):
    if kind == "one_device":
        return allgpu.OneDeviceStrategy("/cpu:0")
    cls = {"mirrored": allgpu.MirroredStrategy, "multi_worker": allgpu.MultiWorkerMirroredStrategy,
           "central_storage": allgpu.CentralStorageStrategy}[kind]
    return cls(bucket_cap_mb=BUCKET_MB)


def _overlapping_all_reduces(model, x, y) -> tuple[int, int]:
    """(all-reduces started before the compiled backward's last node ended, all-reduces) in one backward."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    events = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()]
    backward_end = max(end for name, _, end in events if name == "CompiledFunctionBackward")
    starts = [start for name, start, _ in events if name == "c10d::allreduce_"]  # issued (async), not run
    return sum(s < backward_end for s in starts), len(starts)


def _eager_and_compiled(kind, how):
    from torch._dynamo.utils import counters

    strategy = _strategy(kind)
    torch.manual_seed(strategy.replica_id_in_sync)  # different on purpose: scope() broadcasts replica 0's
    with strategy.scope():
        eager, twin = _mlp(), _mlp()
        twin.load_state_dict(eager.state_dict())
        opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
        opt_twin = torch.optim.Adam(twin.parameters(), lr=0.01) if how == "adam" else \
            torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    if how == "adam":  # both Adam
        opt_eager = torch.optim.Adam(eager.parameters(), lr=0.01)
    if how == "unsplit":  # the control: Dynamo told not to split, so no all-reduce can start early
        torch._dynamo.config.optimize_ddp = False
    compiled = strategy.compile(twin, backend="aot_eager") if how == "strategy.compile" else \
        torch.compile(twin, backend="aot_eager")
    counters.clear()
    data = strategy.distribute_dataset(_data(), 16, seed=5, num_workers=0)
    for step, (x, y) in zip(range(STEPS), data):
        for model, opt in ((compiled, opt_twin), (eager, opt_eager)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    overlap = _overlapping_all_reduces(compiled, x, y) if strategy.num_replicas_in_sync > 1 else (0, 0)
    breaks = sum(counters["graph_break"].values())
    return _compare(eager, twin), overlap, breaks, len(strategy.gradient_sync.buckets)


def _compare(eager, compiled) -> tuple[str, str]:
    """(mismatch message or "", digest of the compiled model's parameters): small, since launch's results travel
    through a pipe."""
    import hashlib

    problems = []
    for (name, want), got in zip(eager.named_parameters(), compiled.parameters()):
        try:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
        except AssertionError as exc:
            problems.append(f"{name}: {str(exc).splitlines()[0:4]}")
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in compiled.parameters()))
    return "\n".join(problems), digest.hexdigest()


# Every strategy once on 2 replicas, Mirrored's three ways and on 4; one replica as OneDevice (the other strategies
# at 1 replica take the same path: no all-reduce). Each case compiles in every replica: 10-25 s on 2 cores.
CASES = [("one_device", 1, "torch.compile"), ("mirrored", 4, "torch.compile")] + [
    ("mirrored", 2, how) for how in ("torch.compile", "strategy.compile", "unsplit")] + [
    (kind, 2, "torch.compile") for kind in ("multi_worker", "central_storage")]


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind,replicas,how", CASES)
def test_compiled_training_equals_eager_and_overlaps(kind, replicas, how):
    results = allgpu.launch(_eager_and_compiled, num_replicas=replicas, args=(kind, how))
    for (mismatch, _), (early, total), breaks, buckets in results:
        assert not mismatch, mismatch
        assert breaks == 0
        if replicas > 1:
            assert buckets >= 3 and total >= buckets
            if how == "unsplit":
                assert early == 0, "the measurement cannot tell overlap from none"
            else:
                assert early >= 1, "no all-reduce started before the compiled backward ended"
    assert len({digest for (_, digest), *_ in results}) == 1  # replicas stay bit-identical
