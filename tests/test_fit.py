import json
import subprocess
import sys

import pytest
import torch
from torch.utils.data import TensorDataset

import allgpu
from allgpu.train import evaluate, fit

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def classification_data(n=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    return TensorDataset(x, y)


def _fit(accumulation_steps=1):
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    history = fit(model, optimizer, torch.nn.CrossEntropyLoss(), classification_data(), epochs=3,
                  global_batch_size=16, strategy=strategy, validation_data=classification_data(37, seed=1),
                  accumulation_steps=accumulation_steps, verbose=False, num_workers=0)
    final = evaluate(model, torch.nn.CrossEntropyLoss(), classification_data(37, seed=1), global_batch_size=4,
                     strategy=strategy)
    return history.history, [p.detach().clone() for p in model.parameters()], final, strategy.gradient_sync.rounds


@pytest.mark.timeout(120)
def test_fit_on_two_replicas_matches_one_and_reduces_metrics():
    one = allgpu.launch(_fit, num_replicas=1)[0]
    two = allgpu.launch(_fit, num_replicas=2)
    for history, params, final, rounds in two:
        assert set(history) >= {"loss", "accuracy", "val_loss", "val_accuracy", "samples_per_second"}
        assert len(history["loss"]) == 3 and rounds == 3 * 8
        for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
            assert history[key] == pytest.approx(one[0][key], rel=1e-4)
        for got, want in zip(params, one[1]):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
        # 37 validation examples over 2 replicas: uneven shards, still each example exactly once
        assert final["accuracy"] == pytest.approx(one[2]["accuracy"]) and final["loss"] == pytest.approx(one[2]["loss"], rel=1e-5)
    assert two[0][0] == two[1][0]
    assert one[0]["accuracy"][-1] > one[0]["accuracy"][0]


@pytest.mark.timeout(120)
def test_fit_with_accumulation_all_reduces_once_per_k():
    history, _, _, rounds = allgpu.launch(_fit, num_replicas=2, args=(2,))[0]
    assert rounds == 3 * 4


def test_fit_validates_arguments():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = torch.nn.Linear(5, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="mixed_precision='fp8'"):
        fit(model, optimizer, torch.nn.CrossEntropyLoss(), classification_data(), epochs=1, global_batch_size=8,
            strategy=strategy, mixed_precision="fp8", verbose=False)
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        fit(model, optimizer, torch.nn.CrossEntropyLoss(), classification_data(), epochs=1, global_batch_size=8,
            strategy=strategy, metrics=("f1",), verbose=False)
    history = fit(model, optimizer, torch.nn.CrossEntropyLoss(), classification_data(), epochs=1,
                  global_batch_size=8, strategy=strategy, mixed_precision="bf16", verbose=False)
    assert history.epoch == [0]


@pytest.mark.timeout(240)
def test_demo_trains_real_digits_on_two_replicas_and_reports(tmp_path):
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "allgpu.cli.main", "demo", "--quiet", "--report", str(report),
                             "--checkpoint-dir", str(tmp_path / "ckpt")],
                            capture_output=True, text=True, timeout=220, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(report.read_text())
    assert summary["replicas"] == 2 and summary["epochs"] == 12
    assert summary["test_accuracy"] >= 0.95
    assert summary["samples_per_second"] > 0
    assert "test accuracy:" in result.stdout and "per replica" in result.stdout
    assert summary["checkpoint"].endswith(".pt") and (tmp_path / "monitor.json").exists()
    assert (tmp_path / "monitor.png").exists()


class _Outputs(dict):
    """A Hugging Face ``ModelOutput``, as far as fit sees one: a dict whose keys are also attributes."""
    __getattr__ = dict.__getitem__


class _HFStyle(torch.nn.Module):
    def __init__(self, wrap):
        super().__init__()
        self.linear, self.wrap = torch.nn.Linear(5, 3), wrap

    def forward(self, x):
        return self.wrap(self.linear(x))


def test_fit_accuracy_reads_the_logits_of_a_model_output():
    """A transformers model trained by fit (loss_fn reading outputs.logits) stopped at the default accuracy metric
    with a bare AttributeError: 'SequenceClassifierOutput' object has no attribute 'detach'."""
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    histories = []
    for wrap in (lambda t: t, lambda t: _Outputs(logits=t), lambda t: (t, t.sum())):
        torch.manual_seed(0)
        with strategy.scope():
            model = _HFStyle(wrap)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = (lambda out, y: torch.nn.functional.cross_entropy(out if isinstance(out, torch.Tensor)
                                                                 else (out[0] if isinstance(out, tuple)
                                                                       else out.logits), y))
        histories.append(fit(model, optimizer, loss, classification_data(), epochs=1, global_batch_size=8,
                             strategy=strategy, verbose=False, shuffle=False).history)
    assert histories[0]["accuracy"] == histories[1]["accuracy"] == histories[2]["accuracy"]
    with strategy.scope():
        model = _HFStyle(lambda t: {"scores": t})
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(allgpu.errors.InputError, match=r"without a `logits` tensor.*metrics=\(\)"):
        fit(model, optimizer, lambda out, y: torch.nn.functional.cross_entropy(out["scores"], y),
            classification_data(), epochs=1, global_batch_size=8, strategy=strategy, verbose=False)
