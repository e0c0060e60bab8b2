import os
import sys
from pathlib import Path

import pytest

# Replica processes started by the tests must not inherit a launcher environment from the shell.
for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ALLGPU_DEVICES"):
    os.environ.pop(key, None)

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # The multi-replica tests run CPU replicas on Gloo; on a GPU machine they would otherwise ask for one GPU
    # per replica. GPU-marked tests (`pytest -m gpu`) keep the GPUs.
    if "gpu" not in (config.getoption("-m") or ""):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


@pytest.fixture
def run_script(tmp_path):
    """Run a Python script as a user would (``python script.py``); returns the CompletedProcess."""
    import subprocess

    def run(source: str, *args: str, timeout: float = 120, env: dict | None = None):
        script = tmp_path / "script.py"
        script.write_text(source)
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                              cwd=tmp_path, env={**os.environ, **(env or {})})

    return run
