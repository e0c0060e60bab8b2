"""PT003 through a loader's ``**kwargs`` dict filled by ``.update(...)`` (issue 21, tuning half a0704: Princeton's
multi_gpu_training DDP MNIST example, written after PyTorch's MNIST example: ``train_kwargs.update(cuda_kwargs)``
with ``'shuffle': True``). The dict is read through its updates; a shuffled evaluation loader (``test_loader``) is
not a training one, and a loader in the branch of ``if args.distributed:`` that builds no sampler is the
single-process path. Written scripts, with whether PT003 must report them."""

import pytest

from tests.lint_helpers import ids

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
    test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)
    torch.distributed.init_process_group("nccl")
    model = DDP(Net().to(local_rank), device_ids=[local_rank])
    for epoch in range(1, args.epochs + 1):
        for data, target in train_loader:
            model(data).sum().backward()
        evaluate(model, test_loader)
"""

PLAIN = "train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)"
SAMPLED = ("sampler = torch.utils.data.distributed.DistributedSampler(dataset1)\n"
           "    train_loader = torch.utils.data.DataLoader(dataset1, batch_size=args.batch_size, sampler=sampler)")
BRANCHES = ("if args.distributed:\n"
            "        sampler = torch.utils.data.distributed.DistributedSampler(dataset1)\n"
            "        train_loader = torch.utils.data.DataLoader(dataset1, batch_size=8, sampler=sampler)\n"
            "    else:\n"
            "        train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)")

CASES = [
    ("update-with-shuffle", True, MNIST.format(update="cuda_kwargs", loader=PLAIN)),
    ("update-keywords", True, MNIST.format(update="shuffle=True", loader=PLAIN)),
    ("the-authors-fix", False, MNIST.format(update="cuda_kwargs", loader=SAMPLED)),
    ("update-unreadable", False, MNIST.format(update="load_settings()", loader=PLAIN)),
    ("single-process-branch", False, MNIST.format(update="cuda_kwargs", loader=BRANCHES)),
]


@pytest.mark.parametrize("name,reported,src", CASES, ids=[c[0] for c in CASES])
def test_loader_kwargs_updated(name, reported, src):
    assert ("PT003" in ids(src)) is reported, name
