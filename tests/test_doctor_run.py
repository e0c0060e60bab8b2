"""`allgpu doctor --run script.py`: a user's script, monitored for a few steps on 2 real CPU replicas."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

SLOW_INPUT = """
import time, torch, allgpu
from torch.utils.data import Dataset

class Slow(Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        time.sleep(0.004)  # decoding that should have been in loader workers
        return torch.randn(8), torch.tensor(i % 2)

strategy = allgpu.MirroredStrategy(num_replicas=2)
with strategy.scope():
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), Slow(), epochs=5, global_batch_size=16,
           strategy=strategy, verbose=False, num_workers=0)
print("script finished")
"""

# An allgpu script (it imports allgpu) that never calls fit; scripts without allgpu: tests/test_doctor_run_any.py.
NO_FIT = "import allgpu\nprint('a custom loop without fit')\n"


def doctor(tmp_path, source, *extra):
    script = tmp_path / "train.py"
    script.write_text(source)
    return subprocess.run([sys.executable, "-m", "allgpu.cli.main", "doctor", *extra, "--run", str(script)],
                          capture_output=True, text=True, timeout=150, cwd=tmp_path)


@pytest.mark.timeout(180)
def test_doctor_run_diagnoses_an_input_bound_script(tmp_path):
    result = doctor(tmp_path, SLOW_INPUT, "--steps", "8", "--report", str(tmp_path / "out"))
    assert result.returncode == 1, result.stderr[-2000:]
    assert "input-bound" in result.stdout and "num_workers=0" in result.stdout
    assert "rep" in result.stdout and "samples/s" in result.stdout  # the per-replica table
    assert result.stdout.count("script finished") >= 1  # the script ran to its end, bounded to one short epoch
    assert (tmp_path / "out" / "monitor.json").exists() and (tmp_path / "out" / "monitor.png").exists()


def test_doctor_run_says_when_nothing_was_monitored(tmp_path):
    result = doctor(tmp_path, NO_FIT)
    assert result.returncode == 1
    assert "never called allgpu.fit()" in result.stderr
    missing = subprocess.run([sys.executable, "-m", "allgpu.cli.main", "doctor", "--run", "nope.py"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert missing.returncode == 2 and "'nope.py' is not a file" in missing.stderr
