"""FullyShardedStrategy: N sharded replicas train exactly like one, holding ~1/N of the state each."""

import contextlib

import pytest
import torch
from torch.distributed.tensor import DTensor

import allgpu
from allgpu.errors import NotMirroredError
from tests.fsdp_models import TiedNet, make_data

pytestmark = pytest.mark.replicas


def _optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.Adam(params, lr=1e-2)


def _held_bytes(model, optimizer) -> int:
    """Bytes of parameters and optimizer state this replica holds (local shards of DTensors)."""
    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t
    total = sum(local(p).numel() * p.element_size() for p in model.parameters())
    for state in optimizer.state.values():
        total += sum(local(t).numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
    return total


def _train(kind, optimizer_name, steps=20, global_batch_size=32, options=None):
    strategy = allgpu.FullyShardedStrategy(**(options or {})) if kind == "sharded" else allgpu.MirroredStrategy()
    torch.manual_seed(strategy.replica_id_in_sync)  # different on purpose: scope() must broadcast
    with strategy.scope():
        model = TiedNet()
        optimizer = _optimizer(optimizer_name, model.parameters())
    data = strategy.distribute_dataset(make_data(), global_batch_size, seed=7, num_workers=0)
    done = 0
    while done < steps:
        for x, y in data:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if done == steps:
                break
    if kind == "sharded":
        full = strategy.full_state_dict(model)
        info = dict(rounds=strategy.gradient_sync.rounds, collectives=strategy.gradient_sync.collectives,
                    plan=strategy.plans, sharded=isinstance(model.embed.weight, DTensor),
                    tied=model.out.weight is model.embed.weight, frozen=not model.scale.requires_grad)
    else:
        full, info = {k: v.detach().clone() for k, v in model.state_dict().items()}, {}
    return full, _held_bytes(model, optimizer), info


@pytest.fixture(scope="module")
def one_replica():
    return {name: allgpu.launch(_train, num_replicas=1, args=("sharded", name))[0] for name in ("sgd", "adam")}


@pytest.mark.timeout(300)
def test_one_sharded_replica_equals_one_mirrored_replica(one_replica):
    mirrored, _, _ = allgpu.launch(_train, num_replicas=1, args=("mirrored", "adam"))[0]
    sharded, _, info = one_replica["adam"]
    assert set(sharded) == set(mirrored)
    for key in mirrored:
        torch.testing.assert_close(sharded[key], mirrored[key], rtol=1e-5, atol=1e-6)
    assert info["plan"] == {"TiedNet": "3 x Block"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_sharded_replicas_match_one_replica_and_hold_a_share(one_replica, replicas, optimizer_name):
    results = allgpu.launch(_train, num_replicas=replicas, args=("sharded", optimizer_name))
    reference, one_bytes, _ = one_replica[optimizer_name]
    full, _, info = results[0]
    assert set(full) == set(reference)
    for key in reference:
        torch.testing.assert_close(full[key], reference[key], rtol=1e-4, atol=1e-6)
    assert all(r[0] == {} for r in results[1:])  # the full state dict is built on replica 0 only
    assert info["sharded"] and info["tied"] and info["frozen"]
    assert info["rounds"] == 20 and info["collectives"] == 20 * 4  # 3 Block units + the root, once a step
    for _, held, _ in results:
        assert held <= (1 / replicas + 0.10) * one_bytes, (held, one_bytes)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("options", [dict(reshard_after_forward=False), dict(offload_to_cpu=True),
                                     dict(shard_modules=lambda m: type(m).__name__ in ("Block", "LayerNorm"))])
def test_sharding_options_train_like_one_replica(one_replica, options):
    full = allgpu.launch(_train, num_replicas=2, args=("sharded", "sgd", 20, 32, options))[0][0]
    for key, value in one_replica["sgd"][0].items():
        torch.testing.assert_close(full[key], value, rtol=1e-4, atol=1e-6)


def test_sharding_plan_default_explicit_and_tied_weights():
    from allgpu.strategies.sharded.plan import describe, plan_units

    model = TiedNet()
    assert describe(plan_units(model)) == "3 x Block"  # Embedding and the tied output Linear stay in the root
    nested = plan_units(model, lambda m: type(m).__name__ in ("Block", "LayerNorm"))
    assert nested.index(model.blocks[0].norm) < nested.index(model.blocks[0])  # children first
    assert describe(plan_units(model, torch.nn.LayerNorm)) == "3 x LayerNorm"
    with pytest.raises(ValueError, match="tied weight"):
        plan_units(model, [torch.nn.Linear])  # out shares embed.weight
    # Blocks stacked in an nn.Sequential whose class also appears inside each block: the blocks are the units,
    # not the whole stack (which would all-gather every block at once).
    nn = torch.nn
    block = lambda: nn.Sequential(nn.LayerNorm(8), nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)))  # noqa: E731
    stacked = nn.Sequential(nn.Linear(4, 8), nn.Sequential(*[block() for _ in range(3)]), nn.Linear(8, 2))
    units = plan_units(stacked)
    assert describe(units) == "2 x Linear, 3 x Sequential" and all(u in units for u in stacked[1])


def _accumulate(k, global_batch_size, steps):
    """fit() with accumulation; an evaluation set of 65 gives replica 0 five batches of 8 and replica 1 four."""
    strategy = allgpu.FullyShardedStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = TiedNet()
        optimizer = _optimizer("adam", model.parameters())
    allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), make_data(), epochs=1, strategy=strategy,
               global_batch_size=global_batch_size, accumulation_steps=k, max_steps_per_epoch=steps * k, seed=3,
               num_workers=0, verbose=False)
    logs = allgpu.evaluate(model, torch.nn.CrossEntropyLoss(), make_data(65, seed=5), global_batch_size=16,
                           strategy=strategy)
    return strategy.full_state_dict(model), strategy.gradient_sync.rounds, logs


@pytest.mark.timeout(300)
def test_fit_with_accumulation_and_uneven_evaluate_match_one_replica():
    reference, _, ref_logs = allgpu.launch(_accumulate, num_replicas=1, args=(1, 32, 5))[0]
    results = allgpu.launch(_accumulate, num_replicas=2, args=(2, 16, 5))
    full, rounds, logs = results[0]
    assert rounds == 5  # one reduce-scatter round per 2 micro-batches
    for key in reference:
        torch.testing.assert_close(full[key], reference[key], rtol=1e-4, atol=1e-6)
    for name, value in ref_logs.items():
        assert logs[name] == pytest.approx(value, rel=1e-4)
        assert results[1][2][name] == pytest.approx(value, rel=1e-4)


def _bf16():
    strategy = allgpu.FullyShardedStrategy(mixed_precision="bf16")
    torch.manual_seed(0)
    with strategy.scope():
        model = TiedNet()
        optimizer = _optimizer("adam", model.parameters())
    data = strategy.distribute_dataset(make_data(), 32, seed=7, num_workers=0)
    for x, y in data:
        out = model(x)
        torch.nn.functional.cross_entropy(out.float(), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return strategy.full_state_dict(model), out.dtype, model.embed.weight.dtype


@pytest.mark.timeout(300)
def test_bf16_computes_in_bf16_keeps_fp32_shards_and_stays_close():
    exact = allgpu.launch(_train, num_replicas=1, args=("sharded", "adam", 10))[0][0]
    full, out_dtype, param_dtype = allgpu.launch(_bf16, num_replicas=2)[0]
    assert out_dtype == torch.bfloat16 and param_dtype == torch.float32
    for key in exact:
        torch.testing.assert_close(full[key], exact[key], rtol=0.1, atol=0.05)
    assert any(not torch.equal(full[k], exact[k]) for k in exact)  # it did run in bf16


def _outside_scope():
    strategy = allgpu.FullyShardedStrategy()
    model = TiedNet()
    try:
        model(make_data(4)[:][0]).sum().backward()
    except NotMirroredError as exc:
        return str(exc)
    return None


@pytest.mark.timeout(120)
def test_model_built_outside_scope_is_an_error():
    messages = allgpu.launch(_outside_scope, num_replicas=2)
    assert all(m is not None and "strategy.scope()" in m for m in messages)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(num_replicas=0), ValueError, "num_replicas=0"),
    (dict(shard_modules="Block"), TypeError, "shard_modules='Block'"),
    (dict(shard_modules=[]), TypeError, "empty list"),
    (dict(reshard_after_forward="yes"), TypeError, "reshard_after_forward='yes'"),
    (dict(mixed_precision="fp8"), ValueError, "mixed_precision='fp8'"),
    (dict(offload_to_cpu=1), TypeError, "offload_to_cpu=1"),
    (dict(timeout=-1), ValueError, "timeout=-1"),
])
def test_bad_arguments_raise_before_start(kwargs, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(").replace("[", r"\[")):
        allgpu.FullyShardedStrategy(**kwargs)


def _replica_one_skips_a_forward():
    import time

    strategy = allgpu.FullyShardedStrategy(timeout=4)
    with strategy.scope():
        model = TiedNet()
    x = make_data(8)[:][0]
    model(x).sum().backward()
    if strategy.replica_id_in_sync == 0:
        model(x)  # EXTRA_FORWARD: replica 1 never makes it, so its all-gather waits
    else:
        time.sleep(10)


@pytest.mark.timeout(120)
def test_a_replica_missing_an_all_gather_is_named_by_the_ledger():
    from allgpu.errors import ReplicaFailedError

    with pytest.raises(ReplicaFailedError) as info:
        allgpu.launch(_replica_one_skips_a_forward, num_replicas=2, timeout=4)
    text = str(info.value)
    assert "CollectiveTimeoutError" in text and "all_gather" in text
    assert "replica 1 is behind, at collective" in text and "reduce_scatter" in text


def test_memory_advice_suggests_sharding_only_when_it_helps():
    from allgpu.core.memory_fit import advice, state_bytes

    model = torch.nn.Linear(1000, 1000)  # 1,001,000 float32 parameters
    adam = torch.optim.Adam(model.parameters())
    assert state_bytes(model, adam) == 1_001_000 * 4 * 4  # parameter, gradient, two moments
    assert state_bytes(model, torch.optim.SGD(model.parameters(), lr=0.1)) == 1_001_000 * 4 * 2
    assert state_bytes(model, adam, replicas=4, sharded=True) == 1_001_000 * 4
    assert advice(model, adam, device_bytes=100 * 2**20, replicas=4) is None  # fits mirrored
    text = advice(model, adam, device_bytes=10 * 2**20, replicas=4)
    assert "FullyShardedStrategy()" in text and "need 15.27 MiB per replica" in text and "4 replicas (3.82 MiB each)" in text
    text = advice(model, adam, device_bytes=10 * 2**20, replicas=1)
    assert "offload_to_cpu=True" in text and "at least 2 devices" in text


@pytest.mark.timeout(300)
def test_bench_memory_counts_a_share_per_replica():
    from allgpu.bench.memory import format_rows, measure

    rows = measure((2,), steps=2, warmup=1, rounds=1)
    one, mirrored, sharded = rows
    assert (one.strategy, mirrored.strategy, sharded.strategy) == ("one_device", "mirrored", "fully_sharded")
    assert mirrored.held == one.held
    assert 0 < one.optimizer - 2 * one.params <= 4 * 50  # Adam: two moments, plus a float32 step per tensor
    assert sharded.held <= 0.5 * one.held + 4 * 50 and sharded.grads == sharded.params  # steps are not sharded
    assert "FS/Mirrored" in format_rows(rows)


def _export_then_train():
    strategy = allgpu.FullyShardedStrategy()
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    exported = strategy.full_state_dict(model)
    before = {k: v.clone() for k, v in exported.items()}
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return all(torch.equal(before[k], exported[k]) for k in exported)


@pytest.mark.timeout(60)
def test_full_state_dict_is_a_copy_even_on_one_replica():
    assert allgpu.launch(_export_then_train, num_replicas=1) == [True]  # training on does not change the export


def _micro_batches(switch: str, k: int = 4, batch: int = 32, steps: int = 2):
    """A hand-written accumulation loop of k micro-batches a step, sync held off on all but the last one by
    ``switch``: nanoGPT's DDP flag, FSDP2's own ``set_requires_gradient_sync``, or FSDP1's/DDP's ``no_sync()``."""
    strategy = allgpu.FullyShardedStrategy()
    n, r = strategy.num_replicas_in_sync, strategy.replica_id_in_sync
    torch.manual_seed(0)
    with strategy.scope():
        model = TiedNet()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = make_data().tensors
    rounds = []
    for step in range(steps):
        before = strategy.gradient_sync.rounds
        for micro in range(k):
            if switch == "flag":
                model.require_backward_grad_sync = micro == k - 1
            elif switch == "fsdp":
                model.set_requires_gradient_sync(micro == k - 1)
            lo = step * batch + micro * (batch // k) + r * (batch // k // n)
            held = model.no_sync() if switch == "no_sync" and micro < k - 1 else contextlib.nullcontext()
            with held:
                loss = torch.nn.functional.cross_entropy(model(x[lo:lo + batch // k // n]),
                                                         y[lo:lo + batch // k // n])
                (loss / k).backward()
        rounds.append(strategy.gradient_sync.rounds - before)
        optimizer.step()
        optimizer.zero_grad()
    return strategy.full_state_dict(model), rounds


@pytest.mark.timeout(300)
def test_no_sync_by_ddp_flag_or_fsdp2_switch_reduces_once_a_step_equal_to_one_replica():
    # Before, `model.require_backward_grad_sync = False` (nanoGPT's form) was ignored under FSDP2: every micro-batch
    # reduce-scattered (4 rounds a step instead of 1); the parameters were right, the communication k times too much.
    # FSDP1's `with model.no_sync():` was an AttributeError (FSDP2 has none).
    reference, _ = allgpu.launch(_micro_batches, num_replicas=1, args=("flag",))[0]
    for switch in ("flag", "fsdp", "no_sync"):
        full, rounds = allgpu.launch(_micro_batches, num_replicas=2, args=(switch,))[0]
        assert rounds == [1, 1], (switch, rounds)
        for key in reference:
            torch.testing.assert_close(full[key], reference[key], rtol=1e-4, atol=1e-6)
