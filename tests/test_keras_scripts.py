"""Keras scripts run as users run them: `python script.py`, `allgpu run`, a replica killed and the job resumed."""

import json
import os
import re
import subprocess
import sys

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
pytest.importorskip("keras")

from tests.conftest import REPO  # noqa: E402

pytestmark = pytest.mark.replicas

SCRIPT = r'''
import json, os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras, numpy as np, allgpu

which = sys.argv[1]
strategy = {"one": lambda: allgpu.OneDeviceStrategy("/cpu:0"),
            "mirrored": lambda: allgpu.MirroredStrategy(num_replicas=2),
            "multi_worker": lambda: allgpu.MultiWorkerMirroredStrategy(),
            "fully_sharded": lambda: allgpu.FullyShardedStrategy()}[which]()
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(192, 5)).astype("float32")
y = (x[:, 0] + x[:, 1] > 0).astype("int64")
with strategy.scope():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

class KillReplica1(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 2 and os.environ.get("KILL") and strategy.replica_id_in_sync == 1:
            os._exit(3)

backup = keras.callbacks.BackupAndRestore(os.environ.get("BACKUP", "backup"), delete_checkpoint=False)
chief = strategy.is_chief or which == "fully_sharded"  # as moved from Horovod: replica 0's progress and saves
saves = [keras.callbacks.ModelCheckpoint(os.environ.get("BACKUP", "backup") + "-model.keras")] if chief else []
history = model.fit(x, y, batch_size=32, epochs=6, shuffle=False, verbose=1 if chief else 0,
                    callbacks=[backup, KillReplica1(), *saves])
weights = [float(w.sum()) for w in model.get_weights()]  # on every replica: gathers the shards when sharded
strategy.barrier()  # together, so their lines meet on the shared stdout: each must reach it whole
for i in range(200):
    print("LINE", strategy.replica_id_in_sync, "x" * 20, i)
if strategy.is_chief:
    print("RESULT", json.dumps({"epochs": len(history.history["loss"]), "loss": history.history["loss"],
                                "weights": weights, "write_through": sys.stdout.write_through,
                                "replicas": strategy.num_replicas_in_sync}))
'''


def _result(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert len(line) == 1, proc.stdout  # printed by replica 0 only
    return json.loads(line[0][len("RESULT "):])


@pytest.mark.timeout(300)
def test_same_script_under_one_device_mirrored_and_multi_worker(run_script, tmp_path):
    """verbose and a ModelCheckpoint on replica 0 only (Horovod's Keras example, moved over): before, the job hung
    (per-batch metric reductions and the writers' barriers on replica 0 alone)."""
    one = _result(run_script(SCRIPT, "one", env={"BACKUP": str(tmp_path / "b1")}, timeout=240))
    mirrored_run = run_script(SCRIPT, "mirrored", env={"BACKUP": str(tmp_path / "b2"), "PYTHONUNBUFFERED": "1"},
                              timeout=240)
    mirrored = _result(mirrored_run)
    script = tmp_path / "script.py"
    run = subprocess.run([sys.executable, "-m", "allgpu.cli.main", "run", "--cpu-replicas", "2", str(script),
                          "multi_worker"], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                         env={**os.environ, "BACKUP": str(tmp_path / "b3"), "PYTHONUNBUFFERED": "1"})
    multi = _result(run)
    for proc, result in ((mirrored_run, mirrored), (run, multi)):  # launch-free and allgpu run
        lines = [line for line in proc.stdout.splitlines() if "LINE" in line]  # PYTHONUNBUFFERED=1, as in images:
        assert len(lines) == 400 and all(re.fullmatch(r"LINE [01] x{20} \d+", line) for line in lines)  # were cut
        assert result["write_through"] is False  # a print() is several writes: under PYTHONUNBUFFERED, one each
    assert (one["replicas"], mirrored["replicas"], multi["replicas"]) == (1, 2, 2)
    assert (tmp_path / "b2-model.keras").is_file() and (tmp_path / "b3-model.keras").is_file()  # replica 0's only
    for other in (mirrored, multi):
        assert other["weights"] == pytest.approx(one["weights"], rel=1e-4, abs=1e-5)
        assert other["loss"] == pytest.approx(one["loss"], rel=1e-4)


@pytest.mark.timeout(300)
def test_backup_and_restore_resumes_after_a_replica_is_killed(run_script, tmp_path):
    env = {"BACKUP": str(tmp_path / "backup")}
    killed = run_script(SCRIPT, "mirrored", env={**env, "KILL": "1"}, timeout=240)
    assert killed.returncode != 0 and "replica 1" in killed.stderr  # the job stopped, naming the replica
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] == 3                                    # epochs 0-2 were backed up by replica 0
    resumed = _result(run_script(SCRIPT, "mirrored", env=env, timeout=240))
    assert resumed["epochs"] == 3                                    # only epochs 3-5 ran again
    assert resumed["loss"][0] < 0.45 and resumed["loss"][-1] < resumed["loss"][0]  # from the restored weights


@pytest.mark.timeout(300)
def test_keras_digits_example_reaches_95_percent_on_two_replicas():
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "keras_digits.py"), "--epochs", "6"],
                          capture_output=True, text=True, timeout=280, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("test accuracy") and "on 2 replicas" in last
    assert float(last.split()[2]) >= 0.95
    assert proc.stdout.count("Epoch 1/6") == 1  # progress from replica 0 only


@pytest.mark.timeout(300)
def test_same_script_under_fully_sharded_strategy_with_allgpu_run(run_script, tmp_path):
    one = _result(run_script(SCRIPT, "one", env={"BACKUP": str(tmp_path / "b1")}, timeout=240))
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    run = subprocess.run([sys.executable, "-m", "allgpu.cli.main", "run", "--cpu-replicas", "2", str(script),
                          "fully_sharded"], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                         env={**os.environ, "BACKUP": str(tmp_path / "b2")})
    sharded = _result(run)
    assert sharded["replicas"] == 2
    assert sharded["weights"] == pytest.approx(one["weights"], rel=1e-4, abs=1e-5)
    assert sharded["loss"] == pytest.approx(one["loss"], rel=1e-4)


def _one_sided_backup(folder: str) -> str:
    import keras
    import numpy as np

    import allgpu
    from allgpu.errors import UnsupportedError

    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    callbacks = [keras.callbacks.BackupAndRestore(folder)] if strategy.is_chief else []
    try:
        model.fit(np.zeros((8, 2)), np.zeros((8, 1)), batch_size=4, epochs=1, verbose=0, callbacks=callbacks)
    except UnsupportedError as exc:
        return str(exc)
    return "trained"


@pytest.mark.timeout(120)
def test_a_backup_given_to_replica_0_alone_is_refused_before_training(tmp_path):
    """Replica 1 would not restore what replica 0 restores: refused on every replica, naming the fix."""
    import allgpu

    for message in allgpu.launch(_one_sided_backup, num_replicas=2, args=(str(tmp_path / "backup"),)):
        assert "BackupAndRestore (every replica restores from it)" in message and "pass them on every" in message
