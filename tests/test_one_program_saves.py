"""Issue 24, item 3: saves as one program makes them. model.save, save_weights, allgpu.checkpoint.save and
torch.save(strategy.full_state_dict(model)) called on every replica: replica 0 writes, the others return once the
file is complete, so loading right after works everywhere (MirroredStrategy on 2 and 4 replicas, the strategy
switched to FullyShardedStrategy). The `if strategy.is_chief:` form still writes; a replica reading before the
chief's write is complete gets a note naming the fix."""

import json
import os

import pytest

from tests.harness import run_python, write_script

SCRIPT = """
import json, os, sys, time
os.environ["KERAS_BACKEND"] = "torch"
import torch, allgpu

n, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
devices = [f"/cpu:{i}" for i in range(n)]
strategy = allgpu.FullyShardedStrategy(devices=devices) if mode == "fsdp" else allgpu.MirroredStrategy(devices=devices)
rank, ok = strategy.replica_id_in_sync, []
if mode == "mkdir":  # Keras' multi-GPU guide, on every replica: check, then create
    if not os.path.exists("ckpt_dir"):
        strategy.barrier()  # every replica has checked: the race, made certain
        os.makedirs("ckpt_dir")
with strategy.scope():
    net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):  # save, load everywhere, train a step, again: a partial or stale read shows
    torch.save(strategy.full_state_dict(net), "net.pt")
    loaded = torch.load("net.pt", weights_only=True)
    mine = strategy.full_state_dict(net)
    ok.append(rank != 0 and mode == "fsdp" or all(torch.equal(loaded[k], v) for k, v in mine.items()))
    net(torch.randn(4, 8)).sum().backward(); optimizer.step(); optimizer.zero_grad()
    path = allgpu.checkpoint.save("ckpt", net, optimizer, step=step, keep=1)
    ok.append(allgpu.checkpoint.restore(path, net, optimizer).step == step)
if mode == "every":
    import keras, numpy as np
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
    x, y = np.random.rand(16, 8).astype("float32"), np.random.rand(16, 2).astype("float32")
    for step in range(3):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        model.save("model.keras")
        again = keras.models.load_model("model.keras")
        ok.append(all(np.array_equal(a, b) for a, b in zip(again.get_weights(), model.get_weights())))
        model.save_weights("model.weights.h5")
        model.load_weights("model.weights.h5")
if mode == "guarded":
    import keras, numpy as np
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    if strategy.is_chief:
        time.sleep(10)  # a chief still busy before writing
        model.save("model.keras")
    keras.models.load_model("model.keras")
json.dump(ok, open(os.path.join(out, f"r{rank}.json"), "w"))
"""


def _run(tmp_path, n, mode):
    script = write_script(tmp_path, "train.py", SCRIPT)
    out = tmp_path / f"out-{mode}{n}"
    out.mkdir()
    work = tmp_path / f"work-{mode}{n}"
    work.mkdir()
    result = run_python([str(script), str(n), mode, str(out)], timeout=300, cwd=work)
    return result, {r: json.loads((out / f"r{r}.json").read_text()) for r in range(n) if (out / f"r{r}.json").exists()}


@pytest.mark.replicas
@pytest.mark.timeout(600)
@pytest.mark.parametrize("n, mode", [(2, "every"), (4, "every"), (2, "fsdp")])
def test_saves_called_on_every_replica_write_once_and_load_everywhere(tmp_path, n, mode):
    result, oks = _run(tmp_path, n, mode)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(oks) == list(range(n)) and all(all(ok) and ok for ok in oks.values()), oks
    left = [p for p in os.listdir(tmp_path / f"work-{mode}{n}") if p.startswith(".allgpu-tmp")]
    assert not left, left


@pytest.mark.replicas
@pytest.mark.timeout(300)
def test_a_guarded_save_read_early_by_another_replica_says_what_to_do(tmp_path):
    result, _ = _run(tmp_path, 2, "guarded")
    assert result.returncode != 0
    assert "replica 1 failed reading a file" in result.stderr, result.stderr[-3000:]
    assert "`if strategy.is_chief:`" in result.stderr and "strategy.barrier()" in result.stderr
    assert "behind" not in result.stderr and "still running" not in result.stderr


@pytest.mark.replicas
@pytest.mark.timeout(300)
def test_a_directory_created_after_a_check_on_every_replica_says_what_to_do(tmp_path):
    """Before: a bare FileExistsError on one replica, now and then (Keras' multi-GPU guide, moved over)."""
    result, _ = _run(tmp_path, 2, "mkdir")
    assert result.returncode != 0 and "FileExistsError" in result.stderr, result.stderr[-3000:]
    assert "another replica created the same path" in result.stderr and "exist_ok=True" in result.stderr
