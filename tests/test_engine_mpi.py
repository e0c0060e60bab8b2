"""The engine tier, mpirun: a real Open MPI ``mpirun`` (Debian's openmpi-bin) runs docs/engines/mpi.md's command
with docs/engines/slurm.md's unchanged train.py: 2 ranks are one job (only rank 0 saves) ending with one replica's
parameters, not two one-replica jobs."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch

from tests.engine_tier import doc_blocks, job_env, require

pytestmark = [pytest.mark.engines, pytest.mark.timeout(300)]

TRAIN = doc_blocks("slurm.md", "python")[0]
COMMAND = doc_blocks("mpi.md", "bash")[0].strip()
# Open MPI refuses root unless told; the CI machine runs as root
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}


def _run(folder, argv):
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN)
    proc = subprocess.run(argv, cwd=folder, env=job_env(**AS_ROOT), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2500:] + proc.stderr[-2500:]
    return proc


def test_mpirun_2_ranks_are_one_job_equal_to_one_replica(tmp_path):
    require(shutil.which("mpirun") is not None, "mpirun not installed (make engine-deps: apt-get install openmpi-bin)")
    assert COMMAND == "mpirun -np 2 python train.py"
    one = _run(tmp_path / "one", [sys.executable, "train.py"])
    argv = shlex.split(COMMAND)
    two = _run(tmp_path / "two", [argv[0], *argv[1:3], sys.executable, *argv[4:]])
    assert "found no GPU" not in two.stdout + two.stderr  # each rank joined the job, none ran alone
    want = torch.load(tmp_path / "one" / "model.pt", weights_only=True)
    got = torch.load(tmp_path / "two" / "model.pt", weights_only=True)
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-6)
    # one job prints its progress once (rank 0); two one-replica jobs would each print theirs
    assert (two.stdout + two.stderr).count("epoch 1/2") == 1, two.stdout[-1500:] + two.stderr[-1500:]
