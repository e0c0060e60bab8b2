"""Issue 21 item 2: the flagship rules follow what the script does with the object and where the flow goes.

Each case is a small written script and whether the rule must report it: a model built outside the scope and then
trained while a strategy exists is the pitfall; one built for a summary, on the single-device branch, or by a
function a strategy-aware library builds under its own scope is not. Helpers, ``**kwargs`` dicts, ``else:``
branches of rank guards, functions handed to ``mp.spawn`` and IterableDatasets are followed.
"""

import pytest

from tests.lint_helpers import ids

TF = "import tensorflow as tf\n"
PT = "import torch, torch.distributed as dist\nimport torch.multiprocessing as mp\n"
SEQ = "tf.keras.Sequential([tf.keras.layers.Dense(1)])"

CASES = [
    # TF001: trained through fit / strategy.run while a strategy exists
    ("tf001-fit", "TF001", True, TF + f"""
strategy = tf.distribute.MirroredStrategy()
model = {SEQ}
model.compile(optimizer="adam", loss="mse")
model.fit(ds, epochs=3)
"""),
    ("tf001-strategy-run", "TF001", True, TF + f"""
strategy = tf.distribute.MirroredStrategy()
model = {SEQ}
optimizer = tf.keras.optimizers.Adam()
def step(x):
    with tf.GradientTape() as tape:
        loss = model(x)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
@tf.function
def dist(x):
    strategy.run(step, args=(x,))
for x in dds:
    dist(x)
"""),
    ("tf001-helper-trained", "TF001", True, TF + f"""
def make():
    m = {SEQ}
    m.compile(optimizer="adam", loss="mse")
    return m
def main():
    strategy = tf.distribute.MirroredStrategy()
    model = make()
    model.fit(ds)
main()
"""),
    ("tf001-export-and-eval", "TF001", False, TF + f"""
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = {SEQ}
    model.compile(optimizer="adam", loss="mse")
model.fit(ds)
export_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])
export_model.save("export")
infer = tf.keras.models.load_model("export")
infer.evaluate(test_ds)
"""),
    # the same builder called once outside the scope for a summary, once inside it for training
    ("tf001-summary-call-path", "TF001", False, TF + f"""
strategy = tf.distribute.MirroredStrategy()
def get_model():
    model = {SEQ}
    return model
get_model().summary()
with strategy.scope():
    model = get_model()
    model.compile(loss="mse", optimizer="adam")
model.fit(ds)
"""),
    ("tf001-single-device-else", "TF001", False, TF + f"""
if args.multi:
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build()
else:
    model = {SEQ}
model.compile(optimizer="adam", loss="mse")
model.fit(ds)
"""),
    # a library given the strategy builds the model under its scope (keras_tuner's distribution_strategy=)
    ("tf001-library-given-strategy", "TF001", False, TF + f"""
import keras_tuner as kt
def build_model(hp):
    model = {SEQ}
    optimizer = tf.keras.optimizers.Adam(hp.Float("lr", 1e-4, 1e-2))
    model.compile(loss="mse", optimizer=optimizer)
    return model
tuner = kt.Hyperband(build_model, objective="val_loss", distribution_strategy=tf.distribute.MirroredStrategy())
tuner.search(x, y, epochs=3)
best = tuner.hypermodel.build(tuner.get_best_hyperparameters()[0])
best.fit(x, y)
"""),
    # TF007: the batch of a pipeline training consumes, also through fit(**kwargs)
    ("tf007-fit-kwargs", "TF007", True, TF + """
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build()
fit_kwargs = {"batch_size": 128, "epochs": 3}
model.fit(x, y, **fit_kwargs)
"""),
    ("tf007-helper-argument", "TF007", True, TF + """
def load(bs):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(bs).prefetch(1)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build()
model.fit(load(32))
"""),
    # batches that build a vocabulary or a metric's candidates do not shape training
    ("tf007-vocabulary-batches", "TF007", False, TF + """
import numpy as np
import tensorflow_datasets as tfds
strategy = tf.distribute.MirroredStrategy()
movies = tfds.load("movielens/100k-movies", split="train").map(lambda x: x["movie_title"])
ratings = tfds.load("movielens/100k-ratings", split="train")
titles = movies.batch(1_000)
vocab = np.unique(np.concatenate(list(titles)))
train = ratings.map(lambda x: x).batch(64 * strategy.num_replicas_in_sync).prefetch(1)
with strategy.scope():
    model = build(vocab)
    metric = Metric(candidates=movies.batch(128).map(model.tower))
model.fit(train)
"""),
    # TF003: one GPU made visible while a strategy is meant to use several; not on the single-device branch
    ("tf003-env", "TF003", True, """
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
"""),
    ("tf003-single-device-branch", "TF003", False, TF + """
gpus = tf.config.list_physical_devices("GPU")
if args.single:
    tf.config.set_visible_devices(gpus[0], "GPU")
    strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
else:
    strategy = tf.distribute.MirroredStrategy()
"""),
    ("tf003-no-multi-device-intent", "TF003", False, """
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
import tensorflow as tf
model.fit(ds)
"""),
    # PT010 / PT002
    ("pt010-setdefault", "PT010", True, 'import os\nos.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")\n' + PT
     + 'dist.init_process_group("nccl")\n'),
    ("pt010-per-rank-in-spawned-worker", "PT010", False, "import os\n" + PT + """
def worker(rank, world):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
mp.spawn(worker, args=(2,), nprocs=2)
"""),
    ("pt002-spawned-worker-cuda0", "PT002", True, PT + """
def worker(rank, world):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(Net().to("cuda:0"))
mp.spawn(worker, args=(2,), nprocs=2)
"""),
    ("pt002-ddp-kwargs-dict", "PT002", True, PT + """
dist.init_process_group("nccl")
ddp_kwargs = dict(device_ids=[0], find_unused_parameters=True)
model = torch.nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
"""),
    ("pt002-single-process-else", "PT002", False, PT + """
if args.distributed:
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(Net().to(args.gpu), device_ids=[args.gpu])
else:
    model = Net().to("cuda:0")
"""),
    # PT007: the else of a rank guard; a worker mp.spawn runs on every rank
    ("pt007-else-of-rank-guard", "PT007", True, PT + """
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net())
if dist.get_rank() == 0:
    print("epoch done")
else:
    torch.save(model.state_dict(), "m.pt")
"""),
    ("pt007-else-of-negated-guard", "PT007", False, PT + """
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net())
if dist.get_rank() != 0:
    pass
else:
    torch.save(model.state_dict(), "m.pt")
"""),
    ("pt007-spawned-worker", "PT007", True, PT + """
def worker(rank, world):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda(rank), device_ids=[rank])
    torch.save(model.state_dict(), "m.pt")
mp.spawn(worker, args=(2,), nprocs=2)
"""),
    ("pt007-spawned-worker-guarded", "PT007", False, PT + """
def worker(rank, world):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda(rank), device_ids=[rank])
    if rank == 0:
        torch.save(model.state_dict(), "m.pt")
mp.spawn(worker, args=(2,), nprocs=2)
"""),
    # PT003 / PT004 in a spawned worker, through a DataLoader(**kw) dict, and over IterableDatasets
    ("pt003-spawned-worker", "PT003", True, PT + """
from torch.utils.data import DataLoader
def worker(rank, world):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda(rank), device_ids=[rank])
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4)
    for x, y in loader:
        model(x).sum().backward(); opt.step()
mp.spawn(worker, args=(2,), nprocs=2)
"""),
    ("pt004-loader-kwargs-dict", "PT004", True, PT + """
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net())
sampler = DistributedSampler(ds)
kw = {"sampler": sampler, "num_workers": 4}
loader = DataLoader(ds, batch_size=32, **kw)
for epoch in range(10):
    for x, y in loader:
        model(x).sum().backward(); opt.step()
"""),
    ("pt003-iterable-never-split", "PT003", True, PT + """
from torch.utils.data import DataLoader, IterableDataset
class Stream(IterableDataset):
    def __iter__(self):
        yield from read()
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net())
loader = DataLoader(Stream(), batch_size=32, num_workers=4)
for x in loader:
    model(x).sum().backward(); opt.step()
"""),
    ("pt003-iterable-split-by-rank", "PT003", False, PT + """
from torch.utils.data import DataLoader, IterableDataset
class Stream(IterableDataset):
    def __iter__(self):
        r, w = dist.get_rank(), dist.get_world_size()
        for i, x in enumerate(read()):
            if i % w == r:
                yield x
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net())
loader = DataLoader(Stream(), batch_size=32, num_workers=4)
for x in loader:
    model(x).sum().backward(); opt.step()
"""),
]


@pytest.mark.parametrize("name,rule,reported,src", CASES, ids=[c[0] for c in CASES])
def test_flow(name, rule, reported, src):
    assert (rule in ids(src)) is reported


def test_code_before_a_syntax_error_is_checked_and_the_rest_named():
    from allgpu.lint import check_source
    src = 'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\nimport tensorflow as tf\n' \
          'strategy = tf.distribute.MirroredStrategy()\nprint "hello"\nmodel.fit(ds)\n'
    found = {f.rule_id: f for f in check_source(src, "t.py")}
    assert "TF003" in found and found["TF003"].line == 2
    assert "lines 5-6 were not checked" in found["E999"].message

