"""Issue 21 item 2, PyTorch, from the author-fix corpus's tuning misses of 2026-11-25 (a0305, a0308, a0310, a0315,
a0317): each flow as a small written script and whether the rule must report it; the fixed version of each is clean."""

import pytest

from tests.lint_helpers import ids

PT = "import torch, torch.distributed as dist\n"

CASES = [
    # NVIDIA's BERT pretraining: apex's DistributedDataParallel wraps the model; the loader draws with a
    # RandomSampler, so every rank reads the same batches
    ("pt003-apex-ddp-random-sampler", "PT003", True, PT + """
from torch.utils.data import DataLoader, RandomSampler
from apex.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
model = DDP(model)
sampler = RandomSampler(data)
loader = DataLoader(data, sampler=sampler, batch_size=8)
for x, y in loader:
    loss_fn(model(x), y).backward()
    opt.step()
"""),
    # its fix: the RandomSampler only when not distributed
    ("pt003-apex-ddp-distributed-sampler-when-distributed", "PT003", False, PT + """
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data.distributed import DistributedSampler
from apex.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
model = DDP(model)
if local_rank == -1:
    sampler = RandomSampler(data)
else:
    sampler = DistributedSampler(data)
loader = DataLoader(data, sampler=sampler, batch_size=8)
for x, y in loader:
    loss_fn(model(x), y).backward()
    opt.step()
"""),
    # the same script's prediction loader, on the main process only (NVIDIA's run_squad/run_glue): nothing duplicated
    ("pt003-ddp-sequential-sampler-on-rank-0", "PT003", False, PT + """
from torch.utils.data import DataLoader, SequentialSampler
from apex.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
model = DDP(model)
if args.do_predict and dist.get_rank() == 0:
    eval_loader = DataLoader(eval_data, sampler=SequentialSampler(eval_data), batch_size=8)
    with torch.no_grad():
        for x, y in eval_loader:
            preds.append(model(x))
"""),
    # or on a dataset cut by rank (IntelAI's MLPerf BERT)
    ("pt003-ddp-sequential-sampler-over-a-rank-slice", "PT003", False, PT + """
from torch.utils.data import DataLoader, SequentialSampler
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(model)
rank = dist.get_rank()
eval_data = eval_data[chunk * rank:chunk * (rank + 1)]
eval_loader = DataLoader(eval_data, sampler=SequentialSampler(eval_data), batch_size=8)
"""),
    # deit's evolution search: every rank evaluates the whole validation set with a SequentialSampler (a0025)
    ("pt003-ddp-sequential-sampler-on-every-rank", "PT003", True, PT + """
from torch.utils.data import DataLoader, SequentialSampler
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(model)
loader_val = DataLoader(dataset_val, sampler=SequentialSampler(dataset_val), batch_size=64)
searcher = EvolutionSearcher(args, model, val_loader=loader_val)
searcher.search()
"""),
    # alphafold3-pytorch's trainer: a micro-step loop under Lightning Fabric, fabric.backward each micro-step
    ("pt006-fabric-micro-step-loop", "PT006", True, """
from lightning import Fabric
class Trainer:
    def __init__(self, model, optimizer, grad_accum_every=4):
        self.fabric = Fabric(accelerator="cuda", devices=8)
        self.fabric.launch()
        self.model, self.optimizer = self.fabric.setup(model, optimizer)
        self.grad_accum_every = grad_accum_every
    def train_step(self, batches):
        for _ in range(self.grad_accum_every):
            loss = self.model(**next(batches))
            self.fabric.backward(loss / self.grad_accum_every)
        self.optimizer.step()
        self.optimizer.zero_grad()
"""),
    # its fix: the micro-steps under fabric.no_backward_sync
    ("pt006-fabric-no-backward-sync", "PT006", False, """
from lightning import Fabric
class Trainer:
    def __init__(self, model, optimizer, grad_accum_every=4):
        self.fabric = Fabric(accelerator="cuda", devices=8)
        self.model, self.optimizer = self.fabric.setup(model, optimizer)
        self.grad_accum_every = grad_accum_every
    def train_step(self, batches):
        for step in range(self.grad_accum_every):
            accumulating = step < self.grad_accum_every - 1
            with self.fabric.no_backward_sync(self.model, enabled=accumulating):
                loss = self.model(**next(batches))
            self.fabric.backward(loss / self.grad_accum_every)
        self.optimizer.step()
"""),
    # ClassyVision's run_optimizer before its fix: no_sync around the backward only, the forward ran earlier
    ("pt006-no-sync-around-backward-only", "PT006", True, PT + """
import contextlib
class Task:
    def prepare(self):
        self.ddp_model = torch.nn.parallel.DistributedDataParallel(self.base_model)
    def train_step(self, x, y):
        loss = self.loss(self.ddp_model(x), y)
        self.run_optimizer(loss)
    def run_optimizer(self, loss):
        do_step = self.idx % self.period == self.period - 1
        ctx = self.ddp_model.no_sync() if not do_step else contextlib.suppress()
        with ctx:
            if self.use_amp:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
        if do_step:
            self.optimizer.step()
"""),
    # its fix: forward and backward inside the block
    ("pt006-no-sync-around-forward-and-backward", "PT006", False, PT + """
import contextlib
class Task:
    def prepare(self):
        self.ddp_model = torch.nn.parallel.DistributedDataParallel(self.base_model)
    def train_step(self, x, y):
        do_step = self.idx % self.period == self.period - 1
        ctx = self.ddp_model.no_sync() if not do_step else contextlib.suppress()
        with ctx:
            loss = self.loss(self.ddp_model(x), y)
            loss.backward()
        if do_step:
            self.optimizer.step()
"""),
    # audiolm-pytorch (a0315): one trainer of the file uses accelerator.no_sync, another's micro-step loop does not
    ("pt006-accelerate-loop-without-no-sync-beside-one-with", "PT006", True, """
from accelerate import Accelerator
class SoundStreamTrainer:
    def train_step(self):
        for i in range(self.grad_accum_every):
            ctx = self.accelerator.no_sync(self.model) if i < self.grad_accum_every - 1 else nullcontext()
            with ctx:
                loss = self.model(next(self.dl_iter))
                self.accelerator.backward(loss / self.grad_accum_every)
        self.optim.step()
class SemanticTrainer:
    def train_step(self):
        for _ in range(self.grad_accum_every):
            loss = self.model(next(self.dl_iter))
            self.accelerator.backward(loss / self.grad_accum_every)
        self.optim.step()
"""),
    # its fix: both trainers control the sync
    ("pt006-accelerate-every-loop-with-no-sync", "PT006", False, """
from accelerate import Accelerator
class SemanticTrainer:
    def train_step(self):
        for i in range(self.grad_accum_every):
            context = partial(self.accelerator.no_sync, self.model) if i < self.grad_accum_every - 1 else nullcontext
            with context():
                loss = self.model(next(self.dl_iter))
                self.accelerator.backward(loss / self.grad_accum_every)
        self.optim.step()
class FineTrainer(SemanticTrainer):
    def train_step(self):
        for i in range(self.grad_accum_every):
            with self.maybe_no_sync(i):
                loss = self.model(next(self.dl_iter))
                self.accelerator.backward(loss / self.grad_accum_every)
        self.optim.step()
    def maybe_no_sync(self, i):
        return self.accelerator.no_sync(self.model) if i < self.grad_accum_every - 1 else nullcontext()
"""),
    # meshgpt-pytorch (a0317): the micro-step loop sits inside `with accelerator.autocast():`, the step after it
    ("pt006-accelerate-loop-inside-autocast", "PT006", True, """
from accelerate import Accelerator
class Trainer:
    def forward(self):
        while self.step < self.num_train_steps:
            with self.accelerator.autocast():
                for _ in range(self.grad_accum_every):
                    loss = self.model(**next(self.dl_iter))
                    self.accelerator.backward(loss / self.grad_accum_every)
            self.optimizer.step()
            self.optimizer.zero_grad()
"""),
    # FSDP's no_sync acts in the backward: a block holding only the backward is fine there
    ("pt006-fsdp-no-sync-around-backward", "PT006", False, PT + """
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(model)
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    if (i + 1) % accum_steps:
        with model.no_sync():
            loss.backward()
    else:
        loss.backward()
        opt.step()
"""),
]


@pytest.mark.parametrize("name,rule,reported,src", CASES, ids=[c[0] for c in CASES])
def test_flow(name, rule, reported, src):
    assert (rule in ids(src)) is reported, name
