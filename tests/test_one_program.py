"""Issue 24, item 1: one program's data. Each replica re-executes the script; after the strategy starts, every
replica continues from replica 0's random state (Python's random, NumPy's and torch's generators), so data prepared
without seeds is the same everywhere and N replicas equal one; Dropout still draws per replica. Data prepared
before the strategy differs per replica: distribute_dataset / fit / evaluate and the Keras adapter stop with a
DataMismatchError naming the difference and the fix."""

import json
import os

import pytest
import torch

from tests.harness import run_python, write_script

SCRIPT = """
import json, os, random, sys
import numpy as np, torch, allgpu

n, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rank = int(os.environ.get("RANK", 0))
# Each replica's own process state before the strategy (unseeded in real scripts; seeded per replica here so
# that replica 0's equals the one-replica run's).
random.seed(100 + rank); np.random.seed(100 + rank); torch.manual_seed(100 + rank)
if mode == "before":
    x = torch.from_numpy(np.random.rand(40, 4)).float()
strategy = allgpu.MirroredStrategy(devices=[f"/cpu:{i}" for i in range(n)])
if mode == "keras_before":
    import keras
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    model.fit(np.random.rand(40, 4) if rank else np.zeros((40, 4)), np.zeros((40, 1)), batch_size=8, verbose=0)
order = np.random.permutation(40)          # train_test_split without random_state, in effect
if mode != "before":
    x = torch.rand(40, 4)[torch.from_numpy(order)]
y = (x.sum(1) + torch.tensor([random.gauss(0, 0.1) for _ in range(40)]) > 2).long()
with strategy.scope():
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
history = allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), (x, y), epochs=2, global_batch_size=8,
                     strategy=strategy, num_workers=0, verbose=0, validation_data=(x[:13], y[:13]))
after = torch.rand(1).item()  # per replica after the first dataset is distributed (Dropout's stream)
# kept from a DDP script: torch.distributed asked directly works at one replica too (a world-of-one group)
shard = list(torch.utils.data.distributed.DistributedSampler(range(40), shuffle=False))
json.dump({"params": [p.detach().reshape(-1).tolist() for p in model.parameters()], "data": x.sum().item(),
           "val": history.history["val_loss"], "after": after, "shard": shard,
           "world": torch.distributed.get_world_size(), "rank": torch.distributed.get_rank()},
          open(os.path.join(out, f"r{rank}.json"), "w"))
"""


def _run(tmp_path, n, mode):
    script = write_script(tmp_path, "train.py", SCRIPT)
    out = tmp_path / f"{mode}{n}"
    out.mkdir()
    result = run_python([str(script), str(n), mode, str(out)], timeout=200, cwd=tmp_path)
    return result, [json.loads((out / f"r{r}.json").read_text()) for r in range(n) if (out / f"r{r}.json").exists()]


@pytest.mark.replicas
@pytest.mark.timeout(400)
def test_data_prepared_without_seeds_after_the_strategy_is_one_programs_on_2_and_4_replicas(tmp_path):
    result, ones = _run(tmp_path, 1, "same")
    assert result.returncode == 0, result.stderr[-3000:]  # before: torch's "Default process group has not been
    (one,) = ones                                          # initialized" from DistributedSampler at one replica
    assert one["shard"] == list(range(40)) and (one["world"], one["rank"]) == (1, 0)
    for n in (2, 4):
        result, replicas = _run(tmp_path, n, "same")
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(replicas) == n
        for r in replicas:
            assert r["data"] == one["data"] and r["params"] == replicas[0]["params"]
            assert r["val"] == pytest.approx(replicas[0]["val"], rel=1e-6)
        assert len({r["after"] for r in replicas}) == n  # each replica's torch stream is its own (Dropout)
        assert sorted(i for r in replicas for i in r["shard"]) == one["shard"]
        assert [(r["world"], r["rank"]) for r in replicas] == [(n, k) for k in range(n)]


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["before", "keras_before"])
def test_data_prepared_before_the_strategy_stops_with_the_named_error(tmp_path, mode):
    result, replicas = _run(tmp_path, 2, mode)
    assert result.returncode != 0 and not replicas
    assert "DataMismatchError" in result.stderr, result.stderr[-3000:]
    assert "example " in result.stderr and "differs between replica 0 and replica 1" in result.stderr
    assert "Fix: seed it" in result.stderr and "after the strategy is created" in result.stderr


TF_SCRIPT = """
import json, os, sys
import numpy as np
rank = int(os.environ.get("RANK", 0))
np.random.seed(100 + rank)  # each replica's own process state before the strategy
import tensorflow as tf
if sys.argv[1] == "user":
    tf.random.set_seed(7)
import allgpu

strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
def order():
    return [int(v) for v in tf.data.Dataset.range(32).shuffle(32)]
result = {"order": order(), "again": order(), "noise": tf.random.uniform([3]).numpy().tolist()}
if sys.argv[1] == "user":
    tf.random.set_seed(7)  # the user's seed, from the start: the first shuffle after it is the same op seed
    result["reference"] = order()
json.dump(result, open(f"r{rank}.json", "w"))
"""


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["unseeded"])  # a seed the user set is kept: tests/test_one_program_unit.py
def test_an_unseeded_tf_data_shuffle_after_the_strategy_is_one_programs(tmp_path, mode):
    pytest.importorskip("tensorflow")
    script = write_script(tmp_path, "train.py", TF_SCRIPT)
    result = run_python([str(script), mode], timeout=200, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1))
    assert first == second  # the same order and draws on both replicas, as tf.distribute's one pipeline
    assert first["order"] != first["again"] and sorted(first["order"]) == list(range(32))
    if mode == "user":
        assert first["order"] == first["reference"]  # the user's tf.random.set_seed(7) was kept
