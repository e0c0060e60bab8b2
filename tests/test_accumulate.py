import warnings

import pytest
import torch

import allgpu
from tests.test_equivalence import make_data

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _run(k: int, global_batch_size: int, optimizer_steps: int = 5, inline: bool = False):
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = strategy.distribute_dataset(make_data(), global_batch_size, seed=3, num_workers=0)
    acc = strategy.accumulate(k)
    steps = 0
    for x, y in data:
        with strategy.accumulate(k) if inline else acc:  # both styles share the strategy's counter
            torch.nn.functional.mse_loss(model(x), y).backward()
        if acc.sync_step:
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            if steps == optimizer_steps:
                break
    sync = strategy.gradient_sync
    return [p.detach().clone() for p in model.parameters()], sync.rounds, sync.collectives, len(sync.buckets)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replicas, inline", [(1, False), (2, False), (2, True)])
def test_k_micro_batches_are_one_all_reduce_and_one_big_batch(replicas, inline):
    accumulated = allgpu.launch(_run, num_replicas=replicas, args=(4, 8, 5, inline))
    big = allgpu.launch(_run, num_replicas=replicas, args=(1, 32))
    params, rounds, collectives, buckets = accumulated[0]
    assert rounds == 5  # 20 micro-batches, 5 all-reduce rounds
    assert collectives == (5 * buckets if replicas > 1 else 0)
    for got, want in zip(params, big[0][0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def _no_sync_keeps_local_gradients():
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        layer = torch.nn.Linear(2, 1, bias=False)
    x = torch.full((1, 2), float(strategy.replica_id_in_sync + 1))
    with strategy.no_sync():
        layer(x).sum().backward()
    local = layer.weight.grad.clone()
    layer.weight.grad = None
    layer(x).sum().backward()
    return local.tolist(), layer.weight.grad.tolist()


@pytest.mark.timeout(60)
def test_no_sync_skips_the_all_reduce():
    (local0, synced0), (local1, synced1) = allgpu.launch(_no_sync_keeps_local_gradients, num_replicas=2)
    assert local0 == [[1.0, 1.0]] and local1 == [[2.0, 2.0]]
    assert synced0 == synced1 == [[1.5, 1.5]]


def test_accumulate_rejects_bad_k():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with pytest.raises(ValueError, match="positive integer"):
        strategy.accumulate(0)


def test_checkpoint_saved_inside_an_accumulation_cycle_warns(tmp_path):
    # Accelerate's checkpointing example saves every N batches whatever the accumulation: resumed from a save
    # between micro-batches, the pending gradients are lost and the run silently differs from one never stopped.
    from allgpu import checkpoint

    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    try:
        with strategy.scope():
            model = torch.nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        acc = strategy.accumulate(2)
        with pytest.warns(RuntimeWarning, match=r"micro-batch 1 of 2 of strategy.accumulate\(2\).*multiple of 2"):
            with acc:
                model(torch.ones(4, 3)).sum().backward()
            checkpoint.save(tmp_path, model=model, optimizer=optimizer, step=1)
        with acc:
            model(torch.ones(4, 3)).sum().backward()
        assert acc.sync_step
        optimizer.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # at a step boundary: silent
            checkpoint.save(tmp_path, model=model, optimizer=optimizer, step=2)
    finally:
        strategy.close()


def _accelerate_style_loop():
    # Accelerate's gradient_accumulation.py: optimizer.step() / zero_grad() on every micro-batch inside accumulate()
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = torch.nn.Linear(6, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 6) + strategy.replica_id_in_sync  # each replica's own micro-batch
    try:
        with strategy.accumulate(2):
            model(x).sum().backward()
            optimizer.step()
    except allgpu.errors.UnsupportedError as exc:
        return str(exc)
    return "stepped"


@pytest.mark.timeout(60)
def test_an_optimizer_step_inside_an_open_accumulation_cycle_is_refused():
    # before: each replica stepped with its own gradients, the 2 replicas silently drifted apart
    for message in allgpu.launch(_accelerate_style_loop, num_replicas=2):
        assert "SGD.step() after micro-batch 1 of 2 of strategy.accumulate(2)" in message, message
        assert "if acc.sync_step: optimizer.step()" in message


def _require_backward_grad_sync_is_no_sync(built_in_scope: bool):
    # nanoGPT's accumulation, kept by a script ported from DDP: `model.require_backward_grad_sync = False` on all
    # but the last micro-batch. Before, allgpu ignored the attribute (a plain module's): every micro-batch all-reduced.
    strategy = allgpu.MirroredStrategy()
    if built_in_scope:
        with strategy.scope():
            layer = torch.nn.Linear(2, 1, bias=False)
    else:
        layer = strategy.mirror(torch.nn.Linear(2, 1, bias=False))
    model = torch.compile(layer, backend="eager") if not built_in_scope else layer
    x = torch.full((1, 2), float(strategy.replica_id_in_sync + 1))
    model.require_backward_grad_sync = False
    model(x).sum().backward()
    local, rounds = layer.weight.grad.clone(), strategy.gradient_sync.rounds
    model.require_backward_grad_sync = True
    model(x).sum().backward()
    return local.tolist(), rounds, layer.weight.grad.tolist(), strategy.gradient_sync.rounds


@pytest.mark.timeout(120)
def test_require_backward_grad_sync_false_skips_the_all_reduce_as_under_ddp():
    for built_in_scope in (True, False):
        r0, r1 = allgpu.launch(_require_backward_grad_sync_is_no_sync, num_replicas=2, args=(built_in_scope,))
        assert r0[0] == [[1.0, 1.0]] and r1[0] == [[2.0, 2.0]] and r0[1] == 0, (built_in_scope, r0, r1)
        assert r0[2] == r1[2] == [[3.0, 3.0]] and r0[3] == 1  # (2 + 4) / 2: the local sums, then averaged


def _model_no_sync(compiled: bool):
    # DDP's `with model.no_sync():` kept by a script ported from DDP (`model = strategy.mirror(model)` for
    # `DDP(model)`), as timm does when `hasattr(model, "no_sync")`. Before: AttributeError ('Linear' object has no
    # attribute 'no_sync'), or, behind timm's hasattr, an all-reduce for every micro-batch.
    strategy = allgpu.MirroredStrategy()
    layer = strategy.mirror(torch.nn.Linear(2, 1, bias=False))
    model = torch.compile(layer, backend="eager") if compiled else layer
    x = torch.full((1, 2), float(strategy.replica_id_in_sync + 1))
    with model.no_sync():
        model(x).sum().backward()
    local, rounds = layer.weight.grad.clone(), strategy.gradient_sync.rounds
    model(x).sum().backward()
    return local.tolist(), rounds, layer.weight.grad.tolist(), strategy.gradient_sync.rounds


@pytest.mark.timeout(120)
def test_model_no_sync_of_a_mirrored_model_is_ddps():
    for compiled in (False, True):
        r0, r1 = allgpu.launch(_model_no_sync, num_replicas=2, args=(compiled,))
        assert r0[0] == [[1.0, 1.0]] and r1[0] == [[2.0, 2.0]] and r0[1] == 0, (compiled, r0, r1)
        assert r0[2] == r1[2] == [[3.0, 3.0]] and r0[3] == 1
