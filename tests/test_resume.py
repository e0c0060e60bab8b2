"""Exact resume: a run stopped mid-epoch continues, on another number of replicas, with exactly the rest."""

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

import allgpu
from allgpu.errors import ReplicaFailedError
from allgpu.train.progress import Callback
from allgpu.train import fit

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)

N = 64


class Counting(torch.nn.Module):
    """A classifier whose buffers count optimizer steps and, per example, how often it was trained on."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.register_buffer("seen", torch.zeros(N))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        if self.training:
            local = torch.zeros(N).index_add_(0, x[:, 4].long(), torch.ones(len(x)))
            if dist.is_initialized():
                dist.all_reduce(local)  # every replica's buffer counts every replica's examples
            self.seen += local
            self.steps += 1
        return self.linear(x[:, :4])


def dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(N, 4, generator=g), torch.arange(N, dtype=torch.float32)[:, None]], dim=1)
    return TensorDataset(x, (x[:, 0] > 0).long())


class CrashAt(Callback):
    def __init__(self, step):
        self.step = step
        self.count = 0

    def on_train_batch_end(self, step, logs):
        self.count += 1
        if self.count == self.step:
            raise RuntimeError(f"simulated crash after step {self.step}")


def _train(directory, crash_at=None):
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = Counting()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    callbacks = [CrashAt(crash_at)] if crash_at else []
    history = fit(model, optimizer, torch.nn.CrossEntropyLoss(), dataset(), epochs=2, global_batch_size=8,
                  strategy=strategy, checkpoint_dir=directory, checkpoint_every=1, callbacks=callbacks,
                  verbose=False, num_workers=0)
    return model.seen.tolist(), model.steps.item(), history.epoch


@pytest.mark.timeout(180)
def test_resume_mid_epoch_on_fewer_replicas_trains_each_example_exactly_once_per_epoch(tmp_path):
    with pytest.raises(ReplicaFailedError, match="simulated crash after step 11"):
        allgpu.launch(_train, num_replicas=4, args=(str(tmp_path), 11))  # epoch 1, 3 of its 8 steps done
    from allgpu import checkpoint

    state = checkpoint.restore(tmp_path, model=Counting())
    assert state.step == 11 and state.data_state["epoch"] == 1 and state.data_state["step"] == 3
    for seen, steps, epochs in allgpu.launch(_train, num_replicas=2, args=(str(tmp_path),)):
        assert seen == [2.0] * N  # 2 epochs: every example exactly twice, none skipped, none repeated
        assert steps == 16
        assert epochs == [0, 1]
