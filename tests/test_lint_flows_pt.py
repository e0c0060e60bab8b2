"""Issue 21 item 2, PyTorch: flows real trainers use (the tuning half of the author-fix corpus), each as a small
written script (or project of scripts) and whether the rule must report it."""

import textwrap

import pytest

from allgpu.lint import RULES, check_path
from tests.lint_helpers import ids

PT = "import torch, torch.distributed as dist\n"

CASES = [
    # a task's per-batch step method: backward each call, the optimizer step every `period` calls; the model is
    # wrapped by a project helper whose name starts with init_
    ("pt006-step-method-steps-every-k", "PT006", True, PT + """
class Task:
    def prepare(self):
        self.ddp_model = init_distributed_data_parallel_model(self.base_model, broadcast_buffers=False)
    def run_optimizer(self, loss):
        idx = self.num_updates // self.global_batch
        if idx % self.period == 0:
            self.optimizer.zero_grad()
        if self.use_amp:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        if idx % self.period == self.period - 1:
            self.optimizer.step()
"""),
    # the same method with the micro-steps' backward under no_sync
    ("pt006-step-method-with-no-sync", "PT006", False, PT + """
import contextlib
class Task:
    def prepare(self):
        self.ddp_model = torch.nn.parallel.DistributedDataParallel(self.base_model)
    def run_optimizer(self, loss, idx):
        last = idx % self.period == self.period - 1
        with (contextlib.nullcontext() if last else self.ddp_model.no_sync()):
            loss.backward()
        if idx % self.period == self.period - 1:
            self.optimizer.step()
"""),
    # a GAN step: the generator steps every n_critic batches, the discriminator every batch: not accumulation
    ("pt006-gan-critic-steps", "PT006", False, PT + """
class GAN:
    def setup(self):
        self.d = torch.nn.parallel.DistributedDataParallel(self.d_net)
    def step(self, i, real):
        d_loss = self.d(real).mean() - self.d(self.g(z)).mean()
        d_loss.backward()
        self.d_opt.step()
        if i % self.n_critic == 0:
            g_loss = -self.d(self.g(z)).mean()
            g_loss.backward()
            self.g_opt.step()
"""),
    # a loop with the amp/plain backward in if/else and the step every k micro-steps
    ("pt006-loop-amp-branches", "PT006", True, PT + """
model = torch.nn.parallel.DistributedDataParallel(net)
for i, (x, y) in enumerate(loader):
    loss = crit(model(x), y) / accum_steps
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
"""),
    # a data module builds the sampler and then hands the loader sampler=None: nothing shards, nothing sets the epoch
    ("pt004-sampler-built-never-used", "PT004", True, PT + """
from torch.utils.data import DataLoader, DistributedSampler
class Data:
    def loader(self, world_size=1):
        ds = self.dataset()
        if world_size > 1:
            sampler = DistributedSampler(ds)
        else:
            sampler = None
        return DataLoader(ds, batch_size=self.batch // world_size, sampler=None, shuffle=True)
"""),
    # the same data module passing its sampler on: the trainer that iterates the loader can set the epoch
    ("pt004-sampler-returned-in-loader", "PT004", False, PT + """
from torch.utils.data import DataLoader, DistributedSampler
class Data:
    def loader(self, world_size=1):
        ds = self.dataset()
        sampler = DistributedSampler(ds) if world_size > 1 else None
        if world_size > 1:
            sampler = DistributedSampler(ds)
        return DataLoader(ds, batch_size=self.batch, sampler=sampler, shuffle=sampler is None)
"""),
    # an evaluation sampler left unused is not a training pitfall
    ("pt004-unused-eval-sampler", "PT004", False, PT + """
from torch.utils.data import DistributedSampler
def build_val(valset):
    val_sampler = DistributedSampler(valset)
    return valset
"""),
    # ``init_ddp(args)`` starts a process group; it wraps nothing
    ("pt009-init-helper-is-not-a-wrapper", "PT009", True, PT + """
dist.init_process_group("nccl")
init_distributed_data_parallel_model(args)
for x, y in loader:
    loss_fn(net(x), y).backward()
    opt.step()
"""),
]


@pytest.mark.parametrize("name,rule,reported,src", CASES, ids=[c[0] for c in CASES])
def test_flow(name, rule, reported, src):
    assert (rule in ids(src)) is reported, name
