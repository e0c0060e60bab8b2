"""Idioms of TensorFlow's distributed tutorials (tensorflow/docs site/en/tutorials/distribute), in minimal
reproductions of our own, on two real Gloo workers started with TF_CONFIG as the multi-worker tutorials start them:

- ``strategy.cluster_resolver`` of a ``MultiWorkerMirroredStrategy()`` given no resolver is TF_CONFIG's, never None,
  and its ``cluster_spec()`` answers ``as_dict()`` (the tutorials' ``_is_chief``);
- a non-chief worker saving into its own temporary directory, then deleting it (multi_worker_with_ctl's pattern),
  finds its copy there (before: nothing was written, and the delete failed);
- ``compute_average_loss`` + ``scale_regularization_loss`` (the tutorials' loss with a regularizer) reduced with
  SUM is one device's loss (before, the regularization was counted once per replica), with one device's gradient;
- ``iterator.get_next()`` / ``get_next_as_optional()`` (input.ipynb); replicas whose own pipelines
  (``distribute_datasets_from_function``) end at different steps leave the loop together instead of one waiting in
  the next collective.
"""

import json

import pytest

from tests.harness import free_port, start_python, write_script

WORKER = """
import os, shutil, sys, torch, allgpu
strategy = allgpu.MultiWorkerMirroredStrategy(timeout=60)
resolver = strategy.cluster_resolver
spec = resolver.cluster_spec()
chief = resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in spec.as_dict()
print("task", resolver.task_type, resolver.task_id, spec.num_tasks("worker"), chief, flush=True)

with strategy.scope():
    model = torch.nn.Linear(2, 1)

# The tutorials' loss: compute_average_loss(per_example) + scale_regularization_loss(regularization); reduced with
# SUM it is one device's loss on the global batch, and the averaged gradient is one device's.
torch.manual_seed(0)
x, y = torch.randn(8, 2), torch.randn(8, 1)
r = strategy.replica_id_in_sync
w, b = model.weight.detach().clone().requires_grad_(), model.bias.detach().clone().requires_grad_()
one_device = ((x @ w.T + b - y) ** 2).mean() + 0.5 * (w ** 2).sum()
one_device.backward()
loss = (allgpu.compute_average_loss(((model(x[4 * r:4 * r + 4]) - y[4 * r:4 * r + 4]) ** 2).squeeze(1))
        + allgpu.scale_regularization_loss(0.5 * (model.weight ** 2).sum()))
loss.backward()
print("loss", torch.allclose(strategy.reduce("sum", loss.detach()), one_device.detach(), rtol=1e-6),
      "grad", torch.allclose(model.weight.grad, w.grad, rtol=1e-5), flush=True)
ckpt = allgpu.checkpoint.Checkpoint(model=model)
base = os.path.join(sys.argv[1], "ckpt")
directory = base if chief else os.path.join(sys.argv[1], "workertemp_%d" % resolver.task_id, "ckpt")
manager = allgpu.checkpoint.CheckpointManager(ckpt, directory=directory, max_to_keep=1)
for _ in range(2):
    path = manager.save()
    print("saved", os.path.isfile(path), sorted(os.listdir(directory)), flush=True)
    if not chief:
        shutil.rmtree(directory)

it = iter(strategy.distribute_dataset(torch.utils.data.TensorDataset(torch.arange(8.0)), global_batch_size=4,
                                      shuffle=False))
print("get_next", it.get_next()[0].tolist(), next(it)[0].tolist(), flush=True)
try:
    it.get_next()
except allgpu.errors.OutOfRangeError:
    print("out of range", flush=True)

own = strategy.distribute_datasets_from_function(
    lambda ctx: [torch.ones(1) * ctx.input_pipeline_id] * (3 if ctx.input_pipeline_id == 0 else 2))
it, steps = iter(own), 0
while True:
    optional = it.get_next_as_optional()
    if not optional.has_value():
        break
    strategy.reduce("sum", optional.get_value())  # a collective each step: a replica left alone would wait here
    steps += 1
print("steps", steps, flush=True)
"""


@pytest.mark.replicas
@pytest.mark.timeout(150)
def test_tutorial_idioms_on_two_tf_config_workers(tmp_path):
    cluster = {"worker": [f"127.0.0.1:{free_port()}", "127.0.0.1:1"]}
    script = write_script(tmp_path, "worker.py", WORKER)
    procs = [start_python([str(script), str(tmp_path)],
                          env={"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})})
             for i in range(2)]
    outs = [p.communicate(timeout=130)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for i, out in enumerate(outs):
        assert f"task worker {i} 2 {i == 0}" in out and "loss True grad True" in out, out
        assert out.count("saved True ['checkpoint', 'ckpt-") == 2, out
        first, second = [2 * i, 2 * i + 1], [2 * i + 4, 2 * i + 5]  # replica r: slice r of each global batch
        assert f"get_next {[float(v) for v in first]} {[float(v) for v in second]}" in out, out
        assert "out of range" in out and "steps 2" in out, out
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checkpoint", "ckpt-2"]
    assert not (tmp_path / "workertemp_1").exists() or not any((tmp_path / "workertemp_1").iterdir())


KERAS_SAVE = """
import os, shutil, sys, time, keras, allgpu
strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"], timeout=60)
chief = strategy.replica_id_in_sync == 0


@keras.saving.register_keras_serializable()
class SlowOnChief(keras.Sequential):  # replica 0 is the slower writer
    def save(self, *args, **kwargs):
        time.sleep(2 if chief else 0)
        return super().save(*args, **kwargs)


with strategy.scope():
    model = SlowOnChief([keras.Input((3,)), keras.layers.Dense(2)])
model_path = os.path.join(sys.argv[1], "model.keras")
write_path = model_path if chief else os.path.join(sys.argv[1], "workertemp_1", "model.keras")
os.makedirs(os.path.dirname(write_path), exist_ok=True)
model.save(write_path)
if not chief:
    shutil.rmtree(os.path.dirname(write_path))
print("loaded", strategy.replica_id_in_sync, keras.models.load_model(model_path).count_params(), flush=True)
"""


@pytest.mark.replicas
@pytest.mark.timeout(150)
def test_a_non_chief_saving_its_own_copy_then_loading_the_chiefs_finds_it_complete(tmp_path):
    # multi_worker_with_keras: every worker saves (non-chiefs into a temporary folder they delete), then loads
    # the chief's file. Before, the non-chief returned from its own save at once and read a file not yet written.
    script = write_script(tmp_path, "save.py", KERAS_SAVE)
    proc = start_python([str(script), str(tmp_path)])
    out = proc.communicate(timeout=130)[0]
    assert proc.returncode == 0, out
    assert "loaded 0 8" in out and "loaded 1 8" in out, out


FAILING_WORKER = """
import torch, allgpu
strategy = allgpu.MultiWorkerMirroredStrategy(timeout=60)
if strategy.replica_id_in_sync == 1:
    raise ValueError("worker 1 gives up")
strategy.reduce("sum", torch.ones(1))
"""


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_a_worker_that_started_no_replica_does_not_claim_to_stop_any(tmp_path):
    # Two TF_CONFIG workers of one replica each: the failing worker's summary read "failed (traceback above).
    # ; stopping the other replicas." (it starts none; the other worker sees it leave at its collective).
    cluster = {"worker": [f"127.0.0.1:{free_port()}", "127.0.0.1:1"]}
    script = write_script(tmp_path, "fail.py", FAILING_WORKER)
    procs = [start_python([str(script)],
                          env={"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})})
             for i in range(2)]
    outs = [p.communicate(timeout=100)[0] for p in procs]
    assert [p.returncode != 0 for p in procs] == [True, True], outs
    assert "allgpu: replica 1 failed (traceback above).\n" in outs[1] and "stopping" not in outs[1], outs[1]
    assert "ReplicaFailedError" in outs[0] and "worker 1 gives up" in outs[0], outs[0]
