"""Issue 21 item 2, PyTorch, from the author-fix corpus's tuning misses of 2026-11-25 03:00 UTC (a0501, a0502): the
GPU picked after the model was placed (PT002), and a per-batch step function that accumulates without the no_sync
its own file defines (PT006). Each flow as a small written script, with whether the rule must report it."""

import pytest

from tests.lint_helpers import ids

PT = "import os, torch, torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"

CASES = [
    # the SMDDP MNIST script (a0501): the bare 'cuda' device is GPU 0 until set_device runs, below the wrap
    ("pt002-model-placed-before-set-device", "PT002", True, PT + """
def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda")
    model = DDP(Net().to(device))
    torch.cuda.set_device(local_rank)
    model.cuda(local_rank)
    for x, y in loader:
        loss_fn(model(x.to(device)), y.to(device)).backward()
"""),
    # its fix: the process's GPU first
    ("pt002-set-device-then-model", "PT002", False, PT + """
def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda")
    model = DDP(Net().to(device), device_ids=[local_rank])
"""),
    # a helper that moves batches to the bare device, called after main set the GPU: not before it in its function
    ("pt002-helper-moves-after-caller-set-device", "PT002", False, PT + """
def train(model, device, loader):
    for x, y in loader:
        loss_fn(model(x.to(device)), y.to(device)).backward()
def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda")
    train(DDP(Net().to(device)), device, loader)
"""),
    # set_device in each pass of a loop around the move: not before it
    ("pt002-set-device-in-the-same-loop", "PT002", False, PT + """
dist.init_process_group("nccl")
device = torch.device("cuda")
for rank in ranks:
    model = Net().to(device)
    torch.cuda.set_device(rank)
"""),
    # speechbrain's Brain (a0502): fit_batch steps every k calls through a flag, and never enters the no_sync the
    # class defines
    ("pt006-step-function-beside-unused-no-sync", "PT006", True, PT + """
from contextlib import contextmanager
class Brain:
    def __init__(self, modules):
        self.modules = {k: DDP(m) for k, m in modules.items()}
    def fit_batch(self, batch):
        should_step = self.step % self.grad_accumulation_factor == 0
        loss = self.compute_objectives(self.compute_forward(batch), batch)
        (loss / self.grad_accumulation_factor).backward()
        if should_step:
            self.optimizer.step()
            self.optimizer.zero_grad()
        return loss.detach()
    @contextmanager
    def no_sync(self, use=True):
        for m in self.modules.values():
            m.require_backward_grad_sync = not use
        yield
"""),
    # the same step function with forward and backward inside the class's no_sync
    ("pt006-step-function-inside-own-no-sync", "PT006", False, PT + """
from contextlib import contextmanager
class Brain:
    def __init__(self, modules):
        self.modules = {k: DDP(m) for k, m in modules.items()}
    def fit_batch(self, batch):
        should_step = self.step % self.grad_accumulation_factor == 0
        with self.no_sync(not should_step):
            loss = self.compute_objectives(self.compute_forward(batch), batch)
            (loss / self.grad_accumulation_factor).backward()
        if should_step:
            self.optimizer.step()
            self.optimizer.zero_grad()
        return loss.detach()
    @contextmanager
    def no_sync(self, use=True):
        for m in self.modules.values():
            m.require_backward_grad_sync = not use
        yield
"""),
]


@pytest.mark.parametrize("name,rule,reported,src", CASES, ids=[c[0] for c in CASES])
def test_flow(name, rule, reported, src):
    assert (rule in ids(src)) is reported, name
