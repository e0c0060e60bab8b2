"""Unseeded random draws inside a Keras step differ between replicas, as each replica's draws do under
tf.distribute (found moving keras-io's DCGAN, whose train_step draws its latent vectors with tf.random.normal,
spelt keras.random.normal after migration: both replicas drew the same vectors, so a global batch held each
fake image twice); outside the steps the streams stay shared."""

import json
import os

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
pytest.importorskip("keras")

pytestmark = pytest.mark.replicas

SCRIPT = r'''
import json, os
os.environ["KERAS_BACKEND"] = "torch"
import keras, numpy as np, torch, allgpu

strategy = allgpu.MirroredStrategy(num_replicas=2)
keras.utils.set_random_seed(0)
drawn = []

class Noisy(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        drawn.append([keras.random.normal((3,)).tolist(), torch.randn(3).tolist()])  # a GAN's latent vectors
        return super().train_step(data)

with strategy.scope():
    model = Noisy()
    model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((8, 2), "float32"), np.ones((8, 1), "float32"), batch_size=4, epochs=1, verbose=0)
after = [keras.random.normal((3,)).tolist(), torch.randn(3).tolist()]  # outside the steps: one program's draws
print("RESULT", json.dumps({"rank": strategy.replica_id_in_sync, "drawn": drawn, "after": after}), flush=True)
'''


@pytest.mark.timeout(200)
def test_unseeded_draws_in_a_step_differ_between_replicas_and_agree_outside(run_script):
    proc = run_script(SCRIPT, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = {r["rank"]: r for r in (json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
                                      if line.startswith("RESULT "))}
    assert set(results) == {0, 1}, proc.stdout
    zero, one = results[0], results[1]
    assert len(zero["drawn"]) == len(one["drawn"]) == 2  # two steps
    for mine, theirs in zip(zero["drawn"], one["drawn"]):
        assert mine[0] != theirs[0] and mine[1] != theirs[1]  # keras.random and torch: each replica its own
    assert zero["drawn"][0] != zero["drawn"][1]  # and a stream, not one draw repeated
    assert zero["after"] == one["after"]  # the shared streams were left as one program's
