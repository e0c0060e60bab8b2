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


CKPT = """
import torch

class CheckpointIO:
    def __init__(self, directory):
        self.directory = directory

    def write(self, state, name):
        torch.save(state, f"{self.directory}/{name}")

class Checkpointer:
    def __init__(self, directory):
        self.io = CheckpointIO(directory)

    def save(self, state, epoch):
        self.io.write(state, f"epoch{epoch}.pt")

class GuardedCheckpointer:
    def save(self, state, epoch):
        if torch.distributed.get_rank() == 0:
            torch.save(state, f"epoch{epoch}.pt")
"""

TRAIN = """
import torch
import torch.distributed
from .ckpt import {cls}

def train(model, loader, optimizer, saver: {cls}, epochs=10):
    for epoch in range(epochs):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        torch.distributed.barrier()
        {save}
"""


def _project(tmp_path, cls, save):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "ckpt.py").write_text(textwrap.dedent(CKPT))
    main = tmp_path / "train.py"
    main.write_text(textwrap.dedent(TRAIN).format(cls=cls, save=save))
    return [(f.rule_id, f.line) for f in check_path(main, select=list(RULES)) if f.rule_id == "PT007"]


def test_pt007_checkpoint_object_of_another_module_saves_on_every_rank(tmp_path):
    # train() calls a collective, so it runs on every rank; the handler's save reaches torch.save two hops down
    assert _project(tmp_path, "Checkpointer", "saver.save(model.state_dict(), epoch)") == [("PT007", 12)]


def test_pt007_checkpoint_object_call_guarded_or_guarding_itself(tmp_path):
    guarded = "if torch.distributed.get_rank() == 0:\n            saver.save(model.state_dict(), epoch)"
    assert _project(tmp_path, "Checkpointer", guarded) == []
    assert _project(tmp_path, "GuardedCheckpointer", "saver.save(model.state_dict(), epoch)") == []


def test_pt007_library_engine_save_is_a_collective_not_followed(tmp_path):
    src = TRAIN.replace("from .ckpt import {cls}", "import deepspeed").replace("saver: {cls}", "engine")
    (tmp_path / "train.py").write_text(textwrap.dedent(src).format(save="engine.save_checkpoint('ckpt')"))
    assert [f for f in check_path(tmp_path / "train.py", select=list(RULES)) if f.rule_id == "PT007"] == []


@pytest.mark.parametrize("body,reported", [
    ("torch.distributed.barrier()\n    torch.save(state, 'last.pt')", True),
    ("torch.distributed.barrier()\n    if torch.distributed.get_rank() == 0:\n        torch.save(state, 'last.pt')", False),
    ("torch.save(state, 'last.pt')", False),  # no collective: who calls it (and under which guard) is unknown
])
def test_pt007_function_calling_a_collective_runs_on_every_rank(body, reported):
    src = PT + "dist.init_process_group('nccl')\ndef save_last(state):\n    " + body + "\n"
    assert ("PT007" in ids(src, "utils.py")) is reported


def test_pt007_helper_that_runs_collectives_is_called_by_every_rank(tmp_path):
    (tmp_path / "ckpt.py").write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist
        class Checkpointer:
            def save(self, state, epoch):
                dist.barrier()
                torch.save(state, f"epoch{epoch}.pt")
    """))
    (tmp_path / "__init__.py").write_text("")
    main = tmp_path / "train.py"
    main.write_text(textwrap.dedent(TRAIN).format(cls="Checkpointer", save="saver.save(model.state_dict(), epoch)"))
    assert [f for f in check_path(main, select=list(RULES)) if f.rule_id == "PT007"] == []


@pytest.mark.parametrize("guard,reported", [
    ("args.gpu == 0", False),  # args.gpu is the rank given to init_process_group
    ("config['rank'] == 0", False),
    ("args.gpu_count > 1", True),
])
def test_pt007_rank_named_by_its_use(guard, reported):
    src = PT + f"""
dist.init_process_group("nccl", world_size=n, rank=args.gpu)
model = torch.nn.parallel.DistributedDataParallel(net)
for epoch in range(3):
    train(model)
    if {guard}:
        torch.save(model.state_dict(), "m.pt")
"""
    assert ("PT007" in ids(src)) is reported


def test_pt007_helper_class_that_tests_the_rank_decides_itself(tmp_path):
    (tmp_path / "ckpt.py").write_text(textwrap.dedent("""
        import torch
        class Checkpointer:
            def __init__(self, rank):
                self.is_rank_zero = rank == 0
            def log(self, msg):
                if self.is_rank_zero:
                    print(msg)
            def save(self, state, epoch):
                torch.save(state, f"epoch{epoch}.pt")
    """))
    (tmp_path / "__init__.py").write_text("")
    main = tmp_path / "train.py"
    main.write_text(textwrap.dedent(TRAIN).format(cls="Checkpointer", save="saver.save(model.state_dict(), epoch)"))
    assert [f for f in check_path(main, select=list(RULES)) if f.rule_id == "PT007"] == []


def test_pt007_in_file_trainer_method_called_through_its_instance():
    src = PT + """
dist.init_process_group("nccl")
class Trainer:
    def __init__(self, model):
        self.model = torch.nn.parallel.DistributedDataParallel(model)
    def snapshot(self, epoch):
        torch.save(self.model.module.state_dict(), "snap.pt")
    def train(self, epochs):
        for epoch in range(epochs):
            step(self.model)
            self.snapshot(epoch)
trainer = Trainer(net)
trainer.train(10)
"""
    assert "PT007" in ids(src)
    assert "PT007" not in ids(src.replace("trainer.train(10)", "if dist.get_rank() == 0:\n    trainer.train(10)"))


DATA = """
import torch
from torch.utils.data import DataLoader

def get_loader(dataset, batch_size):
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=4)
    return loader

def get_loader_with(dataset, batch_size, sampler=None):
    return DataLoader(dataset, batch_size=batch_size, shuffle=sampler is None, sampler=sampler)
"""

DDP_TRAIN = """
import torch
import torch.distributed as dist
from data import {helper}

dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(net)
loader = {helper}(train_set, 32{extra})
for epoch in range(10):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        opt.step()
"""


@pytest.mark.parametrize("helper,extra,reported", [
    ("get_loader", "", True),  # the helper shuffles and takes no sampler: every rank reads everything
    ("get_loader_with", ", sampler=torch.utils.data.DistributedSampler(train_set)", False),
])
def test_pt003_training_loader_built_by_a_helper_module(tmp_path, helper, extra, reported):
    (tmp_path / "data.py").write_text(textwrap.dedent(DATA))
    main = tmp_path / "train.py"
    main.write_text(textwrap.dedent(DDP_TRAIN).format(helper=helper, extra=extra))
    found = [(f.rule_id, f.line) for f in check_path(main, select=list(RULES)) if f.rule_id == "PT003"]
    assert found == ([("PT003", 8)] if reported else [])


MODELS = """
import torchvision

def build_model(name="resnet50", num_classes=10):
    model = torchvision.models.resnet50(num_classes=num_classes)
    return model

def build_synced(num_classes=10):
    import torch
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(torchvision.models.resnet18(num_classes=num_classes))
"""


@pytest.mark.parametrize("helper,reported", [("build_model", True), ("build_synced", False)])
def test_pt008_batchnorm_model_built_by_a_helper_module(tmp_path, helper, reported):
    (tmp_path / "models.py").write_text(textwrap.dedent(MODELS))
    main = tmp_path / "train.py"
    main.write_text(textwrap.dedent(f"""
        import torch
        import torch.distributed as dist
        from models import {helper}
        dist.init_process_group("nccl")
        model = {helper}(num_classes=100).cuda()
        model = torch.nn.parallel.DistributedDataParallel(model)
    """))
    found = [(f.rule_id, f.line) for f in check_path(main, select=list(RULES)) if f.rule_id == "PT008"]
    assert found == ([("PT008", 7)] if reported else [])


def test_pt007_helper_write_under_an_unfollowed_predicate_is_not_counted(tmp_path):
    (tmp_path / "ckpt.py").write_text(textwrap.dedent("""
        import torch
        from utils.dist import is_logging_process
        class Checkpointer:
            def save(self, state, epoch):
                if is_logging_process():
                    torch.save(state, f"epoch{epoch}.pt")
    """))
    (tmp_path / "__init__.py").write_text("")
    main = tmp_path / "train.py"
    main.write_text(textwrap.dedent(TRAIN).format(cls="Checkpointer", save="saver.save(model.state_dict(), epoch)"))
    assert [f for f in check_path(main, select=list(RULES)) if f.rule_id == "PT007"] == []
