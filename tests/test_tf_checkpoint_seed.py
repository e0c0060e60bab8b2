"""Issue 20, part 3: seed 002 Example 3 (``tf.train.Checkpoint`` in a MirroredStrategy custom loop) moved over
unchanged but for the names, run as a user runs it on 1 and 2 CPU replicas; then resumed by a new process."""

import json
import os

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
pytest.importorskip("keras")
pytest.importorskip("sklearn")

pytestmark = pytest.mark.replicas

# The seed's code; changed: imports, the strategy line, MNIST -> digits (64 features; the first 1792 examples, 14
# batches of 128), tf.data -> a DataLoader (read as a batched tf.data dataset), the GradientTape step in its Keras
# PyTorch-backend form, tf.train -> allgpu.checkpoint; added: RESULT printing for the test.
SEED_002_EXAMPLE_3 = r'''
import os, sys, json
os.environ["KERAS_BACKEND"] = "torch"
import keras, torch, allgpu
from sklearn.datasets import load_digits

strategy = allgpu.MirroredStrategy(devices=[f"/cpu:{i}" for i in range(int(sys.argv[1]))])
keras.utils.set_random_seed(strategy.replica_id_in_sync)  # different on purpose: replica 0's weights must win

with strategy.scope():
  model = keras.Sequential([
      keras.layers.Dense(10, activation='relu', input_shape=(64,)),
      keras.layers.Dense(10)
  ])

  optimizer = keras.optimizers.Adam(0.01)
  loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)

checkpoint_dir = './training_checkpoints'
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = allgpu.checkpoint.Checkpoint(optimizer=optimizer, model=model)

x, y = load_digits(return_X_y=True)
x_train = x[:1792].reshape(-1, 64).astype('float32') / 16.0
y_train = keras.utils.to_categorical(y[:1792], num_classes=10)
dataset = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.tensor(x_train), torch.tensor(y_train)), batch_size=128)
distributed_dataset = strategy.experimental_distribute_dataset(dataset)

def train_step(inputs, labels):
    predictions = model(inputs)
    loss = loss_fn(labels, predictions)
    model.zero_grad()
    loss.backward()
    gradients = [v.value.grad for v in model.trainable_variables]
    with torch.no_grad():
      optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

if os.environ.get("RESUME"):
  status = checkpoint.restore(allgpu.checkpoint.latest_checkpoint(checkpoint_dir))
  status.assert_consumed()

for epoch in range(2):
  for inputs, labels in distributed_dataset:
    loss = strategy.run(train_step, args=(inputs, labels))
  print(f"Epoch: {epoch}, Loss: {loss}")

  path = checkpoint.save(file_prefix=checkpoint_prefix)
  print(f"Checkpoint saved at {path}")

trained = [w.copy() for w in model.get_weights()]
latest = allgpu.checkpoint.latest_checkpoint(checkpoint_dir)
checkpoint.restore(latest)
print("Checkpoint restored.")
accuracy = float((model.predict(x_train, verbose=0).argmax(1) == y[:1792]).mean())  # a collective
if strategy.is_chief:
  print("RESULT", json.dumps({"latest": latest, "files": sorted(os.listdir(checkpoint_dir)),
                              "weights": [w.tolist() for w in trained],
                              "restored_equal": all((a == b).all() for a, b in zip(trained, model.get_weights())),
                              "iterations": int(optimizer.iterations), "accuracy": accuracy}))
'''


def _result(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout[-2000:]  # printed by replica 0 only
    return json.loads(lines[0][len("RESULT "):])


@pytest.mark.timeout(900)  # three Keras processes; ~1 min in all on a quiet 2-core machine
def test_seed_002_example_3_saves_restores_and_resumes_on_1_and_2_replicas(run_script, tmp_path):
    import numpy as np

    one = _result(run_script(SEED_002_EXAMPLE_3, "1", timeout=280))
    for folder in ("training_checkpoints",):
        (tmp_path / folder).rename(tmp_path / "one")
    two = _result(run_script(SEED_002_EXAMPLE_3, "2", timeout=280))
    for result in (one, two):
        assert result["files"] == ["checkpoint", "ckpt-1", "ckpt-2"]  # TensorFlow's numbering and state file
        assert result["latest"].endswith(os.path.join("training_checkpoints", "ckpt-2"))
        assert result["restored_equal"] and result["iterations"] == 28  # 2 epochs x 14 steps, Adam's counter too
        assert result["accuracy"] > 0.5  # 28 steps of the seed's 10-unit network (chance: 0.1)
    for a, b in zip(two["weights"], one["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)  # 2 replicas train like one
    state = (tmp_path / "training_checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-2"' in state and 'all_model_checkpoint_paths: "ckpt-1"' in state

    resumed = _result(run_script(SEED_002_EXAMPLE_3, "2", env={"RESUME": "1"}, timeout=280))
    assert resumed["files"] == ["checkpoint", "ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]  # save_counter restored
    assert resumed["iterations"] == 56 and resumed["restored_equal"]
