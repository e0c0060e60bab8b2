"""`allgpu bench --predict --model FILE.py:FUNCTION`: the user's own model measured and predicted, and every
mistake in naming it a one-line usage error (exit 2) naming what to fix."""

import pytest
import torch

from allgpu.bench.user_model import profile_user_model
from allgpu.errors import ArgumentError
from tests.harness import run_cli, write_script

MODELS = """
import torch
from torch import nn

def cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 5))

def tokens():
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(8 * 4, 50))
    return model, (torch.randint(0, 50, (6, 4)), torch.randint(0, 50, (6,)))

def regression():
    return nn.Linear(3, 1), (torch.randn(5, 3), torch.randn(5, 1)), nn.MSELoss()

def not_a_model():
    return 42

if __name__ == "__main__":
    raise SystemExit("the file's main block must not run when the model is loaded")
"""


@pytest.fixture
def models(tmp_path):
    return write_script(tmp_path, "models.py", MODELS)


def test_a_module_with_an_input_shape_is_measured_with_its_own_gradient_bytes(models):
    profile = profile_user_model(f"{models}:cnn", input_shape=(3, 8, 8), classes=5, batch=4)
    expected = sum(p.numel() * 4 for p in torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(288, 5))
                   .parameters())
    assert profile.gradient_bytes == expected
    assert profile.batch_per_device == 4 and profile.backward_s > 0


@pytest.mark.parametrize("function, batch", [("tokens", 6), ("regression", 5)])
def test_a_builder_may_return_its_own_batch_and_loss(models, function, batch):
    profile = profile_user_model(f"{models}:{function}")
    assert profile.batch_per_device == batch and profile.gradient_bytes > 0


@pytest.mark.parametrize("spec, words", [
    ("{models}:cnn", "give --input-shape"),
    ("{models}:not_a_model", "returned a value of type int"),
    ("{models}:missing", "has no function missing()"),
    ("{folder}/nope.py:cnn", "not found"),
    ("no_such_package_xyz:cnn", "cannot be imported"),
])
def test_mistakes_name_the_fix(models, spec, words):
    with pytest.raises(ArgumentError, match=words.replace("(", r"\(").replace(")", r"\)")):
        profile_user_model(spec.format(models=models, folder=models.parent))


@pytest.mark.replicas  # a CLI process
def test_the_cli_prints_the_table_for_a_users_model_and_refuses_it_outside_predict(models, tmp_path):
    plot = tmp_path / "mine.png"
    result = run_cli("bench", "--predict", "--model", f"{models}:cnn", "--input-shape", "3,8,8", "--classes", "5",
                     "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    assert "models.py:cnn on cpu" in result.stdout and "NVSwitch H100" in result.stdout and plot.exists()
    refused = run_cli("bench", "--model", f"{models}:cnn")
    assert refused.returncode == 2 and "works with --predict only" in refused.stderr
