"""The engine tier, Ray Train: a local Ray cluster (``ray.init(num_cpus=...)``, started once for the module) runs
docs/engines/ray.md's function in a ``TorchTrainer``: 2 CPU workers end with one worker's parameters under
MultiWorkerMirroredStrategy and FullyShardedStrategy (which adopt Ray's process group), and a worker killed
mid-run (``FailureConfig(max_failures=1)``) resumes from the checkpoint reported to Ray, exactly."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.engine_tier import REPO, doc_blocks, require

pytestmark = [pytest.mark.engines, pytest.mark.timeout(400)]


class KillOnce:
    """Replica 1 SIGKILLs itself at its 13th batch (epoch 2) of the first attempt (a marker file says it happened)."""

    def __init__(self, marker: str):
        self.marker, self.batches = marker, 0

    def on_train_begin(self, logs): ...

    def on_epoch_begin(self, epoch, logs):  # the restarted group's first epoch: > 0 only if it resumed
        first = Path(self.marker + ".restarted-at")
        if os.path.exists(self.marker) and not first.exists() and os.environ.get("RANK") == "0":
            first.write_text(str(epoch))

    def on_epoch_end(self, epoch, logs): ...
    def on_train_end(self, logs): ...

    def on_train_batch_end(self, step, logs):
        self.batches += 1
        if self.batches == 13 and os.environ.get("RANK") == "1" and not os.path.exists(self.marker):
            Path(self.marker).write_text("killed")
            time.sleep(3)  # Ray takes in a report asynchronously: one followed at once by a crash may be lost
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(scope="module")
def ray_cluster():
    try:
        import ray
        from ray.train.torch import TorchTrainer  # noqa: F401
    except ImportError as exc:
        require(False, f"ray[train] is not installed ({exc}); make install adds the ray extra")
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()


def _doc_function():
    namespace = {"__name__": "ray_train_doc"}
    exec(compile(doc_blocks("ray.md", "python")[0], "docs/engines/ray.md", "exec"), namespace)
    return namespace["train_loop_per_worker"]


def _fit(tmp_path, name, workers, **config):
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out = tmp_path / f"{name}.pt"
    trainer = TorchTrainer(_doc_function(), train_loop_config={"out": str(out), **config},
                           scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
                           run_config=RunConfig(name=name, storage_path=str(tmp_path / "ray"),
                                                failure_config=FailureConfig(max_failures=1)))
    result = trainer.fit()
    assert result.error is None, result.error
    return torch.load(out, weights_only=True), result


@pytest.fixture(scope="module")
def one_worker(ray_cluster, tmp_path_factory):
    """One Ray worker's parameters: the reference every 2-worker run is compared with."""
    return _fit(tmp_path_factory.mktemp("one"), "one", 1)[0]


def test_two_ray_workers_equal_one_and_a_killed_worker_resumes_exactly(one_worker, tmp_path):
    one = one_worker
    two, _ = _fit(tmp_path, "two", 2)
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-6)
    marker = tmp_path / "killed.txt"
    resumed, result = _fit(tmp_path, "killed", 2, strategy="MirroredStrategy", callbacks=[KillOnce(str(marker))])
    assert marker.exists(), "no worker was killed"
    restarted_at = Path(str(marker) + ".restarted-at").read_text()
    assert int(restarted_at) > 0, "the restarted workers began at epoch 0: a restart from scratch, not a resume"
    assert result.checkpoint is not None
    for key in two:
        assert torch.equal(resumed[key], two[key]), (key, (resumed[key] - two[key]).abs().max())


def test_fully_sharded_adopts_rays_process_group(one_worker, tmp_path):
    one = one_worker
    sharded, _ = _fit(tmp_path, "sharded", 2, strategy="FullyShardedStrategy")
    for key in one:
        torch.testing.assert_close(sharded[key], one[key], rtol=1e-4, atol=1e-6)


def _kept_prepare_calls(config):
    """Ray's own example kept as is around a strategy: prepare_data_loader's loader (per-worker batch 4 on a
    DistributedSampler) and prepare_model's DDP around a model built in scope()."""
    import ray.train
    import ray.train.torch
    from torch.utils.data import DataLoader, TensorDataset

    import allgpu
    from allgpu.errors import UnsupportedError

    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = allgpu.MirroredStrategy(num_replicas=4)  # Ray started 2: the warning names Ray's setting
    told = " ".join(str(w.message) for w in caught if "asks for 4 replicas" in str(w.message))
    loader = ray.train.torch.prepare_data_loader(DataLoader(TensorDataset(torch.arange(16.0)), batch_size=4))
    sizes = [len(x) for (x,) in strategy.distribute_dataset(loader)]
    with strategy.scope():
        model = torch.nn.Linear(1, 1)
    try:
        ray.train.torch.prepare_model(model)(torch.zeros(1, 1))
        message = "no error"
    except UnsupportedError as exc:
        message = str(exc)
    Path(config["out"] + str(ray.train.get_context().get_world_rank())).write_text(f"{sizes}\n{told}\n{message}")


def test_rays_prepare_calls_kept_around_a_strategy(ray_cluster, tmp_path):
    """prepare_data_loader's batch_size is per worker (read as the global batch it was halved, silently), the
    refusal of prepare_model's DDP names prepare_model (it told the user to drop a DDP(...) they never wrote), and
    num_replicas=4 in a 2-worker job is told to change ScalingConfig (it named srun and torchrun flags)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out = str(tmp_path / "rank")
    TorchTrainer(_kept_prepare_calls, train_loop_config={"out": out},
                 scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                 run_config=RunConfig(name="kept", storage_path=str(tmp_path / "ray"))).fit()
    for rank in (0, 1):
        sizes, told, message = Path(out + str(rank)).read_text().split("\n", 2)
        assert sizes == "[4, 4]", sizes  # 16 examples, global batch 8: two steps of 4 per worker
        if rank == 0:  # said once a machine (local rank 0), naming Ray's setting, not srun's or torchrun's flags
            assert "Ray Train started 2 processes" in told and "ScalingConfig(num_workers=...)" in told, told
        assert "ray.train.torch.prepare_model(model)" in message and "a second time" in message, message
