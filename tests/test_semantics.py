"""Issue 10, items 6-8: TF's loss spelling, unused parameters and buffers, a second strategy."""

import textwrap

import pytest
import torch

import allgpu
from allgpu.errors import StrategyStartError

GLOBAL = 16


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, generator=g)
    return x, (x[:, 0] > 0).long()


def _tf_style_training(steps=5):
    """TensorFlow's custom-training tutorial, in allgpu: per-example loss, compute_average_loss, SGD."""
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Linear(5, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = _data()
    data = strategy.distribute_dataset(torch.utils.data.TensorDataset(x, y), GLOBAL, num_workers=0, shuffle=False)
    values = []
    for step, (xb, yb) in enumerate(data):
        if step == steps:
            break
        per_example = torch.nn.functional.cross_entropy(model(xb), yb, reduction="none")
        loss = allgpu.compute_average_loss(per_example, global_batch_size=GLOBAL)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        values.append(float(strategy.reduce("sum", loss.detach())))
    strategy.close()  # in-process reference runs must not leave the strategy's hooks behind
    return [p.detach().clone() for p in model.parameters()], values


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_compute_average_loss_gives_one_device_gradients_at_every_replica_count():
    one_params, one_values = _tf_style_training()
    for n in (2, 4):
        for params, values in allgpu.launch(_tf_style_training, num_replicas=n):
            for a, b in zip(params, one_params):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            # The value is TF's: reduce("sum") over replicas is the global-batch mean.
            assert values == pytest.approx(one_values, rel=1e-5)


def test_compute_average_loss_value_and_arguments():
    per = torch.tensor([1.0, 2.0, 3.0, 4.0])
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    assert allgpu.compute_average_loss(per, 8, strategy=strategy).item() == pytest.approx(10 / 8)
    assert allgpu.compute_average_loss(per, strategy=strategy).item() == pytest.approx(10 / 4)
    assert allgpu.compute_average_loss(per, 8, sample_weight=0.5, strategy=strategy).item() == pytest.approx(5 / 8)
    with pytest.raises(ValueError, match="global_batch_size=0"):
        allgpu.compute_average_loss(per, 0)


def test_run_documents_the_loss_convention():
    doc = allgpu.Strategy.run.__doc__
    assert "averaged" in doc and "compute_average_loss" in doc


SECOND = """
import sys, torch, allgpu
first = allgpu.MirroredStrategy(num_replicas=2, timeout=60)
print("first", first.num_replicas_in_sync, flush=True)
same = allgpu.MirroredStrategy()
# One file per replica: two processes' prints on one stdout can interleave ('samefirst 2').
open(f"same{same.replica_id_in_sync}.txt", "w").write(f"same {same.num_replicas_in_sync}")
allgpu.MirroredStrategy(num_replicas=int(sys.argv[1]))
"""


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_a_second_strategy_with_another_count_raises_naming_the_first(run_script, tmp_path):
    result = run_script(SECOND, "4", timeout=90)
    assert result.returncode != 0
    assert "StrategyStartError" in result.stderr
    assert "asks for 4 replicas" in result.stderr and "MirroredStrategy with 2 replicas" in result.stderr
    assert "script.py:3" in result.stderr  # where the first was created
    # a second one without a count joins the first, on both replicas
    assert [(tmp_path / f"same{r}.txt").read_text() for r in (0, 1)] == ["same 2", "same 2"]


def test_a_second_multi_replica_strategy_after_a_single_one_raises():
    first = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with pytest.raises(StrategyStartError, match=r"asks for 2 replicas.*MirroredStrategy with 1 replica "):
            allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
    finally:
        first.close()
    # Once closed, a new one may have its own count (here it falls back: pytest is not a script).
    with pytest.warns(RuntimeWarning):
        allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"]).close()


class Branchy(torch.nn.Module):
    """A head used only for batches holding a flagged example (column 0 > 1), like a mixture-of-experts branch."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(5, 2)
        self.rare = torch.nn.Linear(5, 2)
        self.bn = torch.nn.BatchNorm1d(5)

    def forward(self, x):
        self.bn(x)  # running statistics only: batch statistics per replica would differ from one device's
        out = self.body(x)
        mask = x[:, 0] > 1
        if mask.any():
            out = out + mask[:, None] * self.rare(x)
        return out


def _branchy_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(160, 5, generator=g)
    x[:, 0] = x[:, 0].clamp(max=0.9)
    x[:8:3, 0] = 2.0  # flagged examples only in the first steps; the head then goes unused everywhere
    return torch.utils.data.TensorDataset(x, (x[:, 1] > 0).long())


def _train_branchy(steps=20):
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = Branchy()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    if strategy.replica_id_in_sync == 1:  # replicas drift apart unless buffers are broadcast
        model.bn.running_mean.add_(3.0)
    grads_none = []
    data = strategy.distribute_dataset(_branchy_data(), 8, num_workers=0, shuffle=False)
    for step, (xb, yb) in enumerate(data):
        if step == steps:
            break
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        grads_none.append(model.rare.weight.grad is None)
        optimizer.step()
        optimizer.zero_grad()
    strategy.close()
    return {k: v.clone() for k, v in model.state_dict().items()}, grads_none


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_unused_parameters_keep_grad_none_and_buffers_follow_replica_0():
    reference, ref_none = _train_branchy()
    assert ref_none[0] is False and ref_none[-1] is True  # the head is used early, then not at all
    results = allgpu.launch(_train_branchy, num_replicas=2)
    for state, none in results:
        assert none == ref_none
        for key in ("body.weight", "rare.weight", "rare.bias"):
            torch.testing.assert_close(state[key], reference[key], rtol=1e-5, atol=1e-6)
    for key in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        assert torch.equal(results[0][0][key], results[1][0][key]), key  # no drift


def test_sync_batchnorm_on_cpu_replicas_is_refused_with_the_reason():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    converted = strategy.convert_sync_batchnorm(model)  # one replica: torch's conversion, nothing to sync
    assert isinstance(converted[1], torch.nn.SyncBatchNorm)


PS_SCRIPT = """
import sys, torch, allgpu
from allgpu.errors import UnsupportedError
strategy = allgpu.ParameterServerStrategy(num_ps=1, timeout=30, worker_silence_s=3)
with strategy.scope():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
for name, call in [("fit", lambda: allgpu.fit(model, optimizer, torch.nn.MSELoss(), data, epochs=1,
                                              global_batch_size=8, strategy=strategy, metrics=())),
                   ("save", lambda: allgpu.checkpoint.save(sys.argv[1], model, optimizer)),
                   ("restore", lambda: allgpu.checkpoint.restore(sys.argv[1], model))]:
    try:
        call()
        print(name, "ran", flush=True)
    except UnsupportedError as exc:
        print(name, "refused:", exc, flush=True)
"""


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_parameter_server_refuses_fit_and_checkpoints_up_front(tmp_path):
    import os
    import subprocess
    import sys

    from tests.harness import free_port

    script = tmp_path / "ps.py"
    script.write_text(PS_SCRIPT)
    port, procs = free_port(), []
    for rank in range(2):  # rank 0 a worker, rank 1 the parameter server
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "ALLGPU_DEVICE": "cpu"}
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "ckpt")], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    out = [p.communicate(timeout=90) for p in procs]
    worker = out[0][0]
    for name in ("fit", "save", "restore"):
        assert f"{name} refused:" in worker, out[0]
    assert "MultiWorkerMirroredStrategy" in worker and "optimizer state lives on the parameter servers" in worker
    assert not (tmp_path / "ckpt").exists()  # nothing half-written
    for _, err in out:  # torch's RPC start-up deprecation notice is nothing a user can act on
        assert "You are using a Backend" not in err
