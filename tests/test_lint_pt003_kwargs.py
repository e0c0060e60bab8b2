"""PT003 through a loader's ``**kwargs`` dict filled by ``.update(...)`` (issue 21, tuning half a0704: Princeton's
multi_gpu_training DDP MNIST example, written after PyTorch's MNIST example: ``train_kwargs.update(cuda_kwargs)``
with ``'shuffle': True``). The dict is read through its updates; a loader in the branch of ``if args.distributed:``
that builds no sampler is the single-process path; a shuffled evaluation loader built under ``if rank == 0:`` is
read by one process only (unguarded, every rank evaluates the whole set: reported, as the corpus counts it).
Written scripts, with whether PT003 must report the training loader."""

import textwrap

import pytest

from allgpu.lint import RULES, check_source

MNIST = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def main(args, dataset1, dataset2, local_rank):
    train_kwargs = {{'batch_size': args.batch_size}}
    test_kwargs = {{'batch_size': args.test_batch_size}}
    cuda_kwargs = {{'num_workers': 4, 'pin_memory': True, 'shuffle': True}}
    train_kwargs.update({update})
    test_kwargs.update(cuda_kwargs)
    {loader}
    {test}
    torch.distributed.init_process_group("nccl")
    model = DDP(Net().to(local_rank), device_ids=[local_rank])
    for epoch in range(1, args.epochs + 1):
        for data, target in train_loader:
            model(data).sum().backward()
        evaluate(model, test_loader)
"""

TEST = "test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)"
RANK0_TEST = ("if torch.distributed.get_rank() == 0:\n"
              "        test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)")
PLAIN = "train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)"
SAMPLED = ("sampler = torch.utils.data.distributed.DistributedSampler(dataset1)\n"
           "    train_loader = torch.utils.data.DataLoader(dataset1, batch_size=args.batch_size, sampler=sampler)")
BRANCHES = ("if args.distributed:\n"
            "        sampler = torch.utils.data.distributed.DistributedSampler(dataset1)\n"
            "        train_loader = torch.utils.data.DataLoader(dataset1, batch_size=8, sampler=sampler)\n"
            "    else:\n"
            "        train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)")

CASES = [
    ("update-with-shuffle", True, MNIST.format(update="cuda_kwargs", loader=PLAIN, test=TEST)),
    ("update-keywords", True, MNIST.format(update="shuffle=True", loader=PLAIN, test=TEST)),
    ("the-authors-fix", False, MNIST.format(update="cuda_kwargs", loader=SAMPLED, test=TEST)),
    ("update-unreadable", False, MNIST.format(update="load_settings()", loader=PLAIN, test=TEST)),
    ("single-process-branch", False, MNIST.format(update="cuda_kwargs", loader=BRANCHES, test=TEST)),
]


def _pt003_lines(src):
    return {f.line for f in check_source(textwrap.dedent(src), "train.py", select=list(RULES)) if f.rule_id == "PT003"}


def _line_of(src, text):
    return next(i for i, line in enumerate(textwrap.dedent(src).splitlines(), 1) if text in line)


@pytest.mark.parametrize("name,reported,src", CASES, ids=[c[0] for c in CASES])
def test_training_loader_through_updated_kwargs(name, reported, src):
    lines = {_line_of(src, "train_loader = torch"), _line_of(src, "else:") + 1 if "else:" in src else 0}
    assert bool(_pt003_lines(src) & lines) is reported, name


def test_shuffled_evaluation_loader_on_every_rank_or_on_one():
    every = MNIST.format(update="cuda_kwargs", loader=SAMPLED, test=TEST)
    one = MNIST.format(update="cuda_kwargs", loader=SAMPLED, test=RANK0_TEST)
    assert _pt003_lines(every) == {_line_of(every, "test_loader = torch")}
    assert _pt003_lines(one) == set()
    used_on_one = every.replace("        evaluate(model, test_loader)",
                                "        if torch.distributed.get_rank() == 0:\n            evaluate(model, test_loader)")
    assert _pt003_lines(used_on_one) == set()
