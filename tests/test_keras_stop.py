"""model.stop_training set on one replica only stops fit on every replica (found running a time-budget callback,
TensorFlow Addons' TimeStopping shape, moved over: replica 0 stopped, replica 1 waited in the next all-reduce and
failed after its timeout, blamed on "a collective called on some replicas only")."""

import json
import os

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
pytest.importorskip("keras")

pytestmark = pytest.mark.replicas

SCRIPT = r'''
import json, os
os.environ["KERAS_BACKEND"] = "torch"
import keras, numpy as np, allgpu

strategy = allgpu.MirroredStrategy(num_replicas=2)
rank = strategy.replica_id_in_sync

class StopHere(keras.callbacks.Callback):  # decides from something other than the (global) logs
    def __init__(self, epoch=None, batch=None):
        super().__init__()
        self.epoch, self.batch, self.current = epoch, batch, 0
    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch
    def on_epoch_end(self, epoch, logs=None):
        if rank == 0 and epoch == self.epoch:
            self.model.stop_training = True
    def on_train_batch_end(self, batch, logs=None):
        if rank == 1 and self.current == 1 and batch == self.batch:
            self.model.stop_training = True

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(96, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
at_epoch = model.fit(x, y, batch_size=16, epochs=8, verbose=0, callbacks=[StopHere(epoch=1)])
steps_epoch = int(model.optimizer.iterations)
at_batch = model.fit(x, y, batch_size=16, epochs=8, verbose=0, callbacks=[StopHere(batch=2)])
print("RESULT", json.dumps({"rank": rank, "epochs": [len(at_epoch.history["loss"]), len(at_batch.history["loss"])],
                            "steps": [steps_epoch, int(model.optimizer.iterations)],
                            "weights": [float(w.sum()) for w in model.get_weights()]}), flush=True)
'''


@pytest.mark.timeout(240)
def test_stop_training_on_one_replica_stops_every_replica(run_script):
    proc = run_script(SCRIPT, timeout=200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = {r["rank"]: r for r in (json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
                                      if line.startswith("RESULT "))}
    assert set(results) == {0, 1}, proc.stdout
    for r in results.values():
        # replica 0 stops after epoch 1 (2 epochs of 6 steps); in the second fit replica 1 stops after batch 2 of
        # epoch 1: 6 + 3 more steps, an epoch and a partial one
        assert r["epochs"] == [2, 2] and r["steps"] == [12, 21], r
    assert results[0]["weights"] == results[1]["weights"]
