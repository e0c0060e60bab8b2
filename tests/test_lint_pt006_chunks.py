"""PT006 for a batch split into chunks (issue 21, tuning half a0706: NVIDIA DeepLearningExamples' Transformer-XL
``train.py``): ``for i in range(args.batch_chunk): loss = para_model(...); loss.backward()`` with the optimizer
stepped after the loop accumulates gradients over the chunks, and a DistributedDataParallel model all-reduces at
every chunk unless all but the last run under ``no_sync()``. A backward under ``if args.fp16: ... else: ...``
counts when both branches run one. Written scripts, with whether PT006 must report them."""

import pytest

from tests.lint_helpers import ids

TXL = """
import torch
from torch.nn.parallel import DistributedDataParallel

def train(tr_iter, model, para_model, optimizer, args):
    for batch, (data, target) in enumerate(tr_iter):
        data_chunks = torch.chunk(data, args.{count}, 1)
        target_chunks = torch.chunk(target, args.{count}, 1)
        for i in range(args.{count}):
            {body}
        optimizer.step()
        optimizer.zero_grad()

def main(args, model, optimizer, tr_iter):
    torch.distributed.init_process_group("nccl")
    para_model = DistributedDataParallel(model, device_ids=[args.local_rank])
    train(tr_iter, model, para_model, optimizer, args)
"""

BOTH = """loss = para_model(data_chunks[i], target_chunks[i]) / args.batch_chunk
            if args.fp16:
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()"""
ONE = """loss = para_model(data_chunks[i], target_chunks[i])
            if i == 0:
                loss.backward()"""
FIXED = """if i < args.batch_chunk - 1:
                with para_model.no_sync():
                    loss = para_model(data_chunks[i], target_chunks[i])
                    loss.backward()
            else:
                loss = para_model(data_chunks[i], target_chunks[i])
                loss.backward()"""

CASES = [
    ("chunks-fp16-or-not", True, TXL.format(count="batch_chunk", body=BOTH)),
    ("chunks-the-authors-fix", False, TXL.format(count="batch_chunk", body=FIXED)),
    ("one-branch-only", False, TXL.format(count="batch_chunk", body=ONE)),
    ("a-loop-over-heads-not-chunks", False, TXL.format(count="n_heads", body=BOTH)),
]


@pytest.mark.parametrize("name,reported,src", CASES, ids=[c[0] for c in CASES])
def test_batch_chunks_accumulate(name, reported, src):
    assert ("PT006" in ids(src)) is reported, name
