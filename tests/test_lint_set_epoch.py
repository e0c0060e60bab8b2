"""PT004 by its definition: ``set_epoch`` at the start of every epoch, not once (issue 21). Written fixtures: a
call made once (module level, before the epoch loop, in a setup helper called once, before ``engine.run(...,
max_epochs=n)``) is reported at its line; a call in any loop, an epoch hook, an event handler, a callback, a
function the file never calls, or under a library that sets the epoch itself is not."""

import textwrap

import pytest

from allgpu.lint import check_source
from allgpu.lint.catalog import RULES

HEAD = """import torch, torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(net)
"""

CASES = [
    # once before the epoch loop: every epoch draws the permutation of epoch 0
    ("before-the-loop", True, """
sampler = DistributedSampler(data)
loader = DataLoader(data, sampler=sampler, batch_size=8)
sampler.set_epoch(0)  # MARK
for epoch in range(epochs):
    for x, y in loader:
        loss_fn(model(x), y).backward()
"""),
    ("in-the-loop", False, """
sampler = DistributedSampler(data)
loader = DataLoader(data, sampler=sampler, batch_size=8)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss_fn(model(x), y).backward()
"""),
    # once inside the training function, before its epoch loop
    ("in-the-training-function-before-its-loop", True, """
def main(args):
    sampler = DistributedSampler(data)
    loader = DataLoader(data, sampler=sampler, batch_size=8)
    sampler.set_epoch(args.start_epoch)  # MARK
    for epoch in range(args.start_epoch, args.epochs):
        train(loader)
"""),
    # a setup helper that sets the epoch, called once by the function running the epochs
    ("setup-helper-called-once", True, """
def get_dataflow(config):
    sampler = DistributedSampler(data)
    sampler.set_epoch(0)  # MARK
    return DataLoader(data, sampler=sampler, batch_size=8)

def training(local_rank, config):
    loader = get_dataflow(config)
    for epoch in range(config.epochs):
        for x, y in loader:
            loss_fn(model(x), y).backward()

parallel.run(training, config)
"""),
    # the same helper called at every epoch (the loader rebuilt with the epoch): fine
    ("setup-helper-called-each-epoch", False, """
def get_dataflow(epoch):
    sampler = DistributedSampler(data)
    sampler.set_epoch(epoch)
    return DataLoader(data, sampler=sampler, batch_size=8)

def training(config):
    for epoch in range(config.epochs):
        for x, y in get_dataflow(epoch):
            loss_fn(model(x), y).backward()
"""),
    # an ignite-like engine: set once before engine.run(..., max_epochs=n)
    ("before-engine-run", True, """
def training(local_rank, config):
    loader = auto_dataloader(data, batch_size=8, shuffle=True)
    trainer = Engine(step)
    loader.sampler.set_epoch(0)  # MARK
    trainer.run(loader, max_epochs=config["num_epochs"])
"""),
    # the same engine with an EPOCH_STARTED handler (decorated), and added as a callback
    ("engine-epoch-started-handler", False, """
def training(local_rank, config):
    loader = auto_dataloader(data, batch_size=8, shuffle=True)
    trainer = Engine(step)

    @trainer.on(Events.EPOCH_STARTED)
    def set_epoch(engine):
        loader.sampler.set_epoch(engine.state.epoch - 1)

    trainer.run(loader, max_epochs=config["num_epochs"])
"""),
    ("engine-handler-added-as-callback", False, """
def set_sampler_epoch(engine, loader):
    loader.sampler.set_epoch(engine.state.epoch - 1)

def training(local_rank, config):
    loader = auto_dataloader(data, batch_size=8, shuffle=True)
    trainer = Engine(step)
    trainer.add_event_handler(Events.EPOCH_STARTED, set_sampler_epoch, loader)
    trainer.run(loader, max_epochs=config["num_epochs"])
"""),
    ("engine-lambda-handler", False, """
loader = auto_dataloader(data, batch_size=8, shuffle=True)
trainer = Engine(step)
trainer.add_event_handler(Events.EPOCH_STARTED, lambda e: loader.sampler.set_epoch(e.state.epoch))
trainer.run(loader, max_epochs=5)
"""),
    # a callback's epoch hook, and a method called each epoch from the trainer's loop
    ("callback-on-epoch-begin", False, """
class SamplerEpoch:
    def on_train_epoch_start(self, trainer):
        self.sampler.set_epoch(trainer.epoch)

sampler = DistributedSampler(data)
for epoch in range(epochs):
    for x, y in DataLoader(data, sampler=sampler):
        loss_fn(model(x), y).backward()
"""),
    ("method-called-in-the-loop", False, """
class Trainer:
    def _prepare(self, e):
        self.sampler.set_epoch(e)

    def fit(self, epochs):
        for e in range(epochs):
            self._prepare(e)
            for x, y in self.loader:
                loss_fn(model(x), y).backward()
"""),
    # a library function whose caller is elsewhere: the file cannot say when it runs
    ("uncalled-function", False, """
def reset(sampler, epoch):
    sampler.set_epoch(epoch)

for epoch in range(epochs):
    for x, y in loader:
        loss_fn(model(x), y).backward()
"""),
    # a sampler built anew in each epoch with a new seed: no set_epoch needed, none reported
    ("sampler-rebuilt-each-epoch", False, """
for epoch in range(epochs):
    sampler = DistributedSampler(data, seed=base_seed + epoch)
    for x, y in DataLoader(data, sampler=sampler, batch_size=8):
        loss_fn(model(x), y).backward()
"""),
    # a fixed seed is no new seed: the sampler built in a helper still needs set_epoch
    ("fixed-seed-in-a-helper", True, """
def build(args):
    sampler = DistributedSampler(data, seed=args.seed)  # MARK
    return DataLoader(data, sampler=sampler, batch_size=8)

for epoch in range(epochs):
    for x, y in loader:
        loss_fn(model(x), y).backward()
"""),
    # one run, not several epochs: nothing to shuffle again
    ("single-pass", False, """
sampler = DistributedSampler(data)
sampler.set_epoch(0)
for x, y in DataLoader(data, sampler=sampler):
    loss_fn(model(x), y).backward()
"""),
    # not a sampler: a curriculum set once
    ("not-a-sampler", False, """
sampler = DistributedSampler(data)
criterion.set_epoch(0)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in DataLoader(data, sampler=sampler):
        loss_fn(model(x), y).backward()
"""),
]

LIBRARY_CASES = [
    # Accelerate's prepared loader and Lightning's Trainer set the sampler's epoch themselves
    "from accelerate import Accelerator\n",
    "import lightning as L\n",
]


def _pt004_lines(src: str) -> list[int]:
    text = textwrap.dedent(src)
    return [f.line for f in check_source(text, "train.py", select=list(RULES)) if f.rule_id == "PT004"]


@pytest.mark.parametrize("name,reported,body", CASES, ids=[c[0] for c in CASES])
def test_set_epoch_once_is_reported_at_its_line(name, reported, body):
    src = HEAD + body
    marked = [i + 1 for i, line in enumerate(src.splitlines()) if line.endswith("# MARK")]
    assert _pt004_lines(src) == (marked if reported else []), name


@pytest.mark.parametrize("library", LIBRARY_CASES)
def test_a_library_that_sets_the_epoch_itself_is_left_alone(library):
    src = HEAD + library + CASES[0][2]
    assert _pt004_lines(src) == []


def test_the_message_names_the_fix():
    src = HEAD + CASES[0][2]
    msgs = [f.message for f in check_source(src, "train.py", select=["PT004"])]
    assert len(msgs) == 1 and "once" in msgs[0] and "every epoch" in msgs[0]
