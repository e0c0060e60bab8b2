"""Issue 21: patterns found reading real scripts nobody here labelled (benchmarks/lint_corpus/spotcheck.tsv) and
the tuning half of the author-fix corpus, each as a small written script and whether the rule must report it."""

import pytest

from tests.lint_helpers import ids

TF = "import tensorflow as tf\n"
PT = "import torch, torch.distributed as dist\nimport torch.multiprocessing as mp\n"

MORE = [
    # evaluate() is only ever called under ``if rank == 0:``, whose process owns GPU 0
    ("pt002-function-called-on-rank-0-only", "PT002", False, PT + """
def run(rank, n):
    dist.init_process_group("nccl", rank=rank, world_size=n)
    torch.cuda.set_device(rank)
    net = torch.nn.parallel.DistributedDataParallel(Net().cuda(rank), device_ids=[rank])
    if rank == 0:
        evaluate(net, loader)
def evaluate(net, loader):
    for x in loader:
        net(x.cuda(0))
mp.spawn(run, nprocs=2, args=(2,))
"""),
    ("pt004-validation-sampler", "PT004", False, PT + """
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net())
train_sampler = DistributedSampler(trainset)
def validate(model, valset):
    val_sampler = DistributedSampler(valset)
    for x in DataLoader(valset, sampler=val_sampler):
        model(x)
for epoch in range(10):
    train_sampler.set_epoch(epoch)
    validate(model, valset)
"""),
    # a Trainer class that guards one save by rank and not the other
    ("pt007-method-of-rank-aware-class", "PT007", True, PT + """
class Trainer:
    def __init__(self, net, rank):
        self.rank = rank
        self.net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
    def save_network(self, path):
        if self.rank == 0:
            torch.save(self.net.module.state_dict(), path)
    def save_training_state(self, path):
        torch.save({"model": self.net.state_dict()}, path)
"""),
    # loaded models whose trainable_variables are only iterated to interpolate weights, then exported
    ("tf001-weights-interpolated-not-trained", "TF001", False, TF + """
strategy = tf.distribute.TPUStrategy(resolver)
with strategy.scope():
    gen = build()
def interpolate(alpha, p1, p2):
    a = tf.keras.models.load_model(p1)
    b = tf.keras.models.load_model(p2)
    for v1, v2 in zip(b.trainable_variables, a.trainable_variables):
        v1.assign((1 - alpha) * v2 + alpha * v1)
    return b
interpolate(0.2, "p1", "p2").save("out")
"""),
    # an optimizer written straight into compile outside the scope (tensorflow/docs' own fix); tf.optimizers alias
    ("tf001-optimizer-inline-in-compile", "TF001", True, TF + """
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
with strategy.scope():
    model = tf.keras.models.Sequential([tf.keras.layers.Dense(10)])
model.compile(tf.optimizers.SGD(), loss="mse")
model.fit(dc, epochs=5, steps_per_epoch=20)
"""),
    # a metric updated in a plain loop on the coordinator is evaluation, not a replica step
    ("tf001-metric-updated-on-coordinator", "TF001", False, TF + """
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build()
    optimizer = tf.keras.optimizers.SGD()
@tf.function
def step(x):
    strategy.run(replica_fn, args=(x,))
acc = tf.keras.metrics.Accuracy()
for x, y in eval_dataset:
    acc.update_state(y, model(x))
"""),
    # absl flag default, a library loader's batch_size= and dense_to_ragged_batch (keras-cv's own fixes)
    ("tf007-flag-default-through-a-loader", "TF007", True, TF + """
from absl import flags
from keras_cv.datasets import imagenet
flags.DEFINE_integer("batch_size", 256, "Batch size")
FLAGS = flags.FLAGS
strategy = tf.distribute.MirroredStrategy()
train_ds = imagenet.load(split="train", batch_size=FLAGS.batch_size)
train_ds = train_ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
with strategy.scope():
    model = build()
model.fit(train_ds, epochs=3)
"""),
    ("tf007-dense-to-ragged-batch", "TF007", True, TF + """
strategy = tf.distribute.MirroredStrategy()
BATCH_SIZE = 4
train_ds = tf.data.TFRecordDataset(files).map(parse)
train_ds = train_ds.apply(tf.data.experimental.dense_to_ragged_batch(BATCH_SIZE, drop_remainder=True))
with strategy.scope():
    model = build()
model.fit(train_ds.prefetch(2))
"""),
    ("tf007-helper-call-bound-for-validation", "TF007", False, TF + """
strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH_SIZE = 16 * strategy.num_replicas_in_sync
def extract(d, batch_size=GLOBAL_BATCH_SIZE):
    return tf.data.TFRecordDataset(d).batch(batch_size).prefetch(1)
train_dataset = extract("train")
val_dataset = extract("val", batch_size=1)
with strategy.scope():
    model = build()
model.fit(train_dataset, validation_data=val_dataset)
"""),
    ("tf007-tf008-unit-test-module", "TF007", False, TF + """
def make_ds():
    return tf.data.Dataset.from_tensors(x).batch(1)
class MultiDeviceTest(tf.test.TestCase):
    def test_fit(self):
        strategy = tf.distribute.MirroredStrategy()
        with strategy.scope():
            model = build()
        model.fit(make_ds())
"""),
    # the prefetch is in the function that returns the pipeline; another function's `dataset` is not this one
    ("tf008-name-bound-in-its-own-function", "TF008", False, TF + """
def read_file(f):
    dataset = tf.data.TFRecordDataset(f)
    dataset = dataset.batch(32)
    return dataset
def input_fn(context=None):
    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(read_file)
    dataset = dataset.batch(64)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return dataset
"""),
    # ``from header import *`` (the header imports torch and deepspeed)
    ("pt007-star-import-deepspeed", "PT007", True, """
from header import *
class Agent:
    def __init__(self, model, args):
        self.args = args
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, config_params=args["ds"])
    def log(self, loss):
        if self.args["local_rank"] == 0:
            print(loss)
    def save_model(self, path):
        torch.save(self.engine.module.state_dict(), path)
"""),
    # a pipeline handed to the project's training function is what training consumes
    ("tf008-pipeline-given-to-a-train-function", "TF008", True, TF + """
from mylib import train
def build_tf_dataset(gen):
    train_dataset = tf.data.Dataset.from_generator(gen, output_signature=sig)
    return train_dataset.with_options(options)
train_dataset = build_tf_dataset(gen)
train(model, train_dataset=train_dataset, epochs=3)
"""),
    # torchdata's StatefulDataLoader under (torchft's) DDP with the sampler built but never passed
    ("pt003-stateful-dataloader", "PT003", True, PT + """
from torchdata.stateful_dataloader import StatefulDataLoader
from torchft import DistributedDataParallel, DistributedSampler
sampler = DistributedSampler(trainset, num_replicas=1, rank=0)
trainloader = StatefulDataLoader(trainset, batch_size=64, shuffle=True, num_workers=2)
model = DistributedDataParallel(manager, Net())
for x, y in trainloader:
    model(x).sum().backward(); opt.step()
"""),
    # lczero-training's own fix: one set_visible_devices per listed GPU leaves only the last one
    ("tf003-set-visible-once-per-gpu-in-a-loop", "TF003", True, TF + """
gpus = tf.config.experimental.list_physical_devices("GPU")
for i in cfg["gpu"].split(","):
    tf.config.experimental.set_visible_devices(gpus[int(i)], "GPU")
"""),
    ("tf003-horovod-one-gpu-per-process", "TF003", False, TF + """
import horovod.tensorflow as hvd
hvd.init()
gpus = tf.config.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
"""),
    # a library module's train() that nothing in the file calls, making its own strategy (IsoNet's reviewed fix)
    ("tf001-uncalled-function-with-its-own-strategy", "TF001", True, TF + """
from tensorflow.keras.optimizers import Adam
from tensorflow.keras.models import load_model
def train_continue(model_file, lr=4e-4, n_gpus=2):
    strategy = tf.distribute.MirroredStrategy()
    if n_gpus > 1:
        with strategy.scope():
            model = load_model(model_file)
    else:
        model = load_model(model_file)
    optimizer = Adam(learning_rate=lr)
    model.compile(optimizer=optimizer, loss="mae")
    model.fit(train_data, epochs=3)
"""),
    ("tf001-uncalled-builder-without-a-strategy", "TF001", False, TF + """
def build(lr):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(lr)
    model.compile(optimizer=optimizer, loss="mse")
    return model
def get_strategy():
    return tf.distribute.MirroredStrategy()
"""),
    # pytorch-accelerated's own fix: a trainer stepping every k micro-steps through its own methods, no no_sync
    ("pt006-accelerate-trainer-methods", "PT006", True, """
import torch
from accelerate import Accelerator
class Trainer:
    def backward_step(self, loss):
        self._accelerator.backward(loss)
    def optimizer_step(self):
        self.optimizer.step()
    def _run_train_epoch(self, train_dl):
        for step, batch in enumerate(train_dl):
            loss = self.calculate_train_batch_loss(batch) / self.gradient_accumulation_steps
            self.backward_step(loss)
            if (step + 1) % self.gradient_accumulation_steps == 0:
                self.optimizer_step()
"""),
    # a parameter its docstring declares a tf.data.Dataset (imitation-learning's fix: num_parallel_calls)
    ("tf009-parameter-documented-as-a-dataset", "TF009", True, TF + '''
class Preprocessor:
    def preprocess(self, dataset, mode):
        """Applies transformation to dataset

        Args:
            dataset: a tf.data.Dataset
        """
        dataset = dataset.map(self.read_fn)
        return dataset
'''),
    ("tf009-undocumented-parameter", "TF009", False, TF + """
def preprocess(dataset):
    return dataset.map(tokenize)
"""),
    # an Accelerate script runs on every process `accelerate launch` starts
    ("pt007-accelerate-unguarded-save", "PT007", True, """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model, opt, dl = accelerator.prepare(model, opt, dl)
train(model, dl)
torch.save(accelerator.unwrap_model(model).state_dict(), "m.pt")
"""),
    ("pt007-accelerate-main-process-save", "PT007", False, """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model, opt, dl = accelerator.prepare(model, opt, dl)
train(model, dl)
if accelerator.is_main_process:
    torch.save(accelerator.unwrap_model(model).state_dict(), "m.pt")
"""),
    # transformers' Trainer copies: args.should_save is the main-process test
    ("pt007-trainer-should-save", "PT007", False, PT + """
dist.init_process_group("nccl")
class MyTrainer:
    def _save_checkpoint(self, output_dir):
        if self.args.should_save:
            torch.save(self.optimizer.state_dict(), output_dir + "/optimizer.pt")
"""),
    # an Estimator input_fn returning a helper's (features, labels) drawn from the pipeline (tensorflow-without-a-phd)
    ("tf008-input-fn-through-a-features-helper", "TF008", True, TF + """
def features_and_labels(dataset):
    it = dataset.make_one_shot_iterator()
    return it.get_next()
def dataset_input_fn(files):
    dataset = tf.data.Dataset.from_tensor_slices(files)
    dataset = dataset.map(load, num_parallel_calls=8).batch(50).repeat()
    return features_and_labels(dataset)
"""),
]


@pytest.mark.parametrize("name,rule,reported,src", MORE, ids=[c[0] for c in MORE])
def test_flow_seen_in_real_code(name, rule, reported, src):
    assert (rule in ids(src)) is reported


def test_maps_outside_training_pipelines_and_eval_loaders_are_left_alone():
    """TF009 when training's pipelines are known: a map that builds a vocabulary or a peek is not one of them;
    PT005: a loader named for evaluation that accelerator.prepare hands on (the Hugging Face course's layout)."""
    tf_src = TF + """
import tensorflow_datasets as tfds
strategy = tf.distribute.MirroredStrategy()
ratings = tfds.load("movielens/100k-ratings", split="train")
user_ids = ratings.batch(1_000_000).map(lambda x: x["user_id"])
train = ratings.map(lambda x: x).batch(64 * strategy.num_replicas_in_sync).prefetch(1)
with strategy.scope():
    model = build(user_ids)
model.fit(train)
"""
    from allgpu.lint import check_source
    import textwrap
    lines = [f.line for f in check_source(textwrap.dedent(tf_src), "t.py") if f.rule_id == "TF009"]
    assert lines == [7]  # the training pipeline's map, not the vocabulary's (line 6)
    pt_src = """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
accelerator = Accelerator()
train_dataloader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=4)
eval_dataloader = DataLoader(eval_set, batch_size=8)
model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dataloader, eval_dataloader)
for batch in train_dl:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
"""
    assert "PT005" not in ids(pt_src)


LOADERS = [
    # a data module that trains nothing itself: its training loader returns a batched, unprefetched pipeline
    ("tf008-loader-with-split", True, TF + """
def load_voc(split, batch_size):
    ds = tf.data.TFRecordDataset(files[split]).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.apply(tf.data.experimental.dense_to_ragged_batch(batch_size=batch_size))
    return ds, info
"""),
    ("tf008-loader-bound-to-train", True, TF + """
def make_dataset(x, y, batch_size=1):
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch_size)
def get_datasets(x, y, batch_size):
    train_dataset = make_dataset(x, y, batch_size)
    return dict(train_dataset=train_dataset)
"""),
    # a package's dataset module: ``load(split, ...)`` (keras_cv.datasets.imagenet.load before PR #774)
    ("tf008-package-load-function", True, TF + """
def load(split, batch_size=None):
    ds = tf.data.TFRecordDataset(files[split]).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if batch_size is not None:
        ds = ds.batch(batch_size)
    return ds
"""),
    ("tf008-loader-prefetched", False, TF + """
def load_voc(split, batch_size):
    return tf.data.TFRecordDataset(files[split]).batch(batch_size).prefetch(tf.data.AUTOTUNE)
"""),
    ("tf008-loader-unbatched", False, TF + """
def load_voc(split):
    return tf.data.TFRecordDataset(files[split]).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
"""),
    ("tf008-demo-loader", False, TF + """
def load_demo_dataset(name="voc", batch_size=9):
    return tf.data.TFRecordDataset(name).batch(batch_size)
"""),
    ("tf008-loader-no-split", False, TF + """
def load_flowers(name="oxford_flowers102", batch_size=64):
    return tf.data.TFRecordDataset(name).batch(batch_size)
"""),
    ("tf008-test-dataset-returned", False, TF + """
def create_dataset(split, batch_size):
    test_dataset = tf.data.Dataset.from_tensor_slices(x).batch(batch_size)
    return test_dataset
"""),
]


@pytest.mark.parametrize("name,expected,src", LOADERS, ids=[c[0] for c in LOADERS])
def test_tf008_data_module_loaders(name, expected, src):
    """TF008 in a file that trains nothing: the batched pipelines its training loaders return (keras-cv's
    pascal_voc loader, cosmoflow's dummy dataset; tuning half) feed training in another file."""
    assert ("TF008" in ids(src)) is expected


def test_tf003_tensorpack_multi_gpu_trainer_is_multi_device_intent():
    """TF003: a TF1 multi-tower trainer (tensorpack's SyncMultiGPUTrainer) means several GPUs are wanted, so a
    default ``CUDA_VISIBLE_DEVICES='0'`` hides them (tensorpack's cifar-convnet fix, tuning half); a one-GPU
    script choosing its GPU is left alone."""
    src = TF + """
import os
if args.gpu:
    os.environ['CUDA_VISIBLE_DEVICES'] = args.gpu
else:
    os.environ['CUDA_VISIBLE_DEVICES'] = '0'
if get_nr_gpu() <= 1:
    QueueInputTrainer(config).train()
else:
    SyncMultiGPUTrainer(config).train()
"""
    assert "TF003" in ids(src)
    assert "TF003" not in ids(src.replace("SyncMultiGPUTrainer", "QueueInputTrainer"))


CONFIG_BATCH = TF + """
import yaml
config = yaml.safe_load(open("train.yaml"))
dataset_train = build_dataset(preprocess_config=config["train"]["preprocess"], mode="train")
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model(batch_size=config["train"]["preprocess"]["batch_size"])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset_train, epochs=3)
"""


def test_tf007_batch_from_a_configuration_mapping():
    """TF007: the builder of fit's input gets the part of the configuration that holds the batch size, and the
    file never scales it by the replica count (DeepReg's 'batch_size in config is per device' fix, tuning half);
    scaled in place, or a per-replica name in sight, it is left alone. ``.batch(cfg["batch_size"])`` likewise."""
    assert "TF007" in ids(CONFIG_BATCH)
    scaled = CONFIG_BATCH.replace('strategy = tf.distribute.MirroredStrategy()\n', 'strategy = tf.distribute.'
                                  'MirroredStrategy()\nconfig["train"]["preprocess"]["batch_size"] *= '
                                  'strategy.num_replicas_in_sync\n')
    assert "TF007" not in ids(scaled)
    assert "TF007" not in ids(CONFIG_BATCH.replace('preprocess_config=config["train"]["preprocess"]', 'mode="x"'))
    direct = TF + """
opts = vars(parser.parse_args())
ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=4).batch(opts['batch_size']).prefetch(1)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build()
model.fit(ds)
"""
    assert "TF007" in ids(direct)
    assert "TF007" not in ids(direct.replace("MirroredStrategy()", "MirroredStrategy()\nprint(strategy.num_replicas_in_sync)"))
