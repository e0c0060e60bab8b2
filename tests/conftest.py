import os
import signal
from pathlib import Path

import pytest

# A shell without job control starts background jobs (`make test &`, some CI runners) with SIGINT ignored, and an
# ignored signal stays ignored across exec: the Ctrl-C tests' replicas would never see their SIGINT. A handled
# signal is reset to the default at exec, so handling it here gives every process the tests start a normal Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Replica processes started by the tests must not inherit a launcher environment from the shell.
# Nor a cluster engine's (a suite run inside an srun step, a pod or a SkyPilot node would join that job).
for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ALLGPU_DEVICES", "SLURM_STEP_ID",
            "SLURM_STEPID", "PET_NNODES", "PET_NODE_RANK", "SKYPILOT_NODE_RANK"):
    os.environ.pop(key, None)

# Keras on its PyTorch backend, the one allgpu distributes, for the whole session and every process it starts
# (a Keras script a test runs without naming a backend would otherwise take ~/.keras/keras.json's or Keras'
# default, tensorflow). Before, tests/test_keras.py set it at import, so a test passed only when that file was
# collected too.
os.environ.setdefault("KERAS_BACKEND", "torch")

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # The multi-replica tests run CPU replicas on Gloo; on a GPU machine they would otherwise ask for one GPU
    # per replica. GPU-marked tests (`pytest -m gpu`) keep the GPUs.
    if "gpu" not in (config.getoption("-m") or ""):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


@pytest.fixture
def run_script(tmp_path):
    """Run a Python script as a user would (``python script.py``); returns the CompletedProcess."""
    from tests.harness import run_python

    def run(source: str, *args: str, timeout: float = 120, env: dict | None = None):
        script = tmp_path / "script.py"
        script.write_text(source)
        return run_python([str(script), *args], timeout=timeout, env=env, cwd=tmp_path)

    return run


# -- tiers ------------------------------------------------------------------------------------------------------
# unit: in-process, seconds (`make test-fast`); replicas: starts processes (Gloo replicas, launchers, the CLI as a
# user runs it); gpu: needs a CUDA device. A test is unit unless marked replicas or gpu, and a unit test that
# starts a process fails, naming the marker, so the fast tier stays fast.

def pytest_collection_modifyitems(config, items):
    for item in items:
        if not any(item.get_closest_marker(m) for m in ("replicas", "gpu", "engines")):
            item.add_marker(pytest.mark.unit)


class _UnitTierStartedAProcess(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import multiprocessing.process
    import subprocess

    def refuse(*args, **kwargs):
        raise _UnitTierStartedAProcess(
            f"{request.node.nodeid} starts a process but is in the unit tier. Fix: mark it "
            "@pytest.mark.replicas (or the module: pytestmark = pytest.mark.replicas).")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    yield
