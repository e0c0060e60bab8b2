"""Issue 21, TensorFlow/Keras author-fix tuning half (OpenNMT-tf's runner, a0101): a script that makes no strategy
hands its training pipeline to the project's trainer, which makes a MirroredStrategy and passes the dataset to
``experimental_distribute_dataset``; the builder's configured batch is then the global batch (TF007, reported at
the builder's call in the script). Written as small projects; whether the script must be reported."""

import textwrap

import pytest

from allgpu.lint import check_path

TRAINER = """
import tensorflow as tf

class Trainer(object):
  def __init__(self, model, devices=None):
    self._model = model
    self._strategy = {strategy}

  def __call__(self, dataset, max_step=None):
    with self._strategy.scope():
      dataset = self._strategy.{distribute}(dataset)
    for batch in dataset:
      self._strategy.run(self._step, args=(batch,))

  def _step(self, batch):
    return self._model(batch)
"""

RUNNER = """
import tensorflow as tf
from pkg import training as training_util

class Runner(object):
  def __init__(self, model, config):
    self._model = model
    self._config = config

  def train(self, num_devices=1):
    config = self._config
    train_config = config["train"]
    dataset = self._model.inputter.make_training_dataset(
        config["data"]["train_features_file"],
        train_config["batch_size"],{extra}
        shuffle_buffer_size=train_config["sample_buffer_size"])
    devices = ["GPU:%d" % i for i in range(num_devices)]
    accum_steps = train_config["effective_batch_size"] // (train_config["batch_size"] * num_devices)
    trainer = training_util.Trainer(self._model, devices=devices)
    trainer(dataset, max_step=train_config["max_step"])

  def evaluate(self):
    dataset = self._model.inputter.make_evaluation_dataset(self._config["eval"]["batch_size"])
    return dataset
"""


def _tf007(tmp_path, strategy="tf.distribute.MirroredStrategy(devices=devices)",
           distribute="experimental_distribute_dataset", extra="", runner=RUNNER) -> list[int]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "training.py").write_text(textwrap.dedent(TRAINER.format(strategy=strategy, distribute=distribute)))
    script = pkg / "runner.py"
    script.write_text(textwrap.dedent(runner.format(extra=extra)))
    return [f.line for f in check_path(script, select=["TF007"])]


def test_configured_batch_handed_to_a_trainer_that_distributes_it_is_reported(tmp_path):
    lines = _tf007(tmp_path)
    assert lines == [13]  # the builder's call, in the script


def test_message_names_the_trainer_and_its_module(tmp_path):
    pkg = tmp_path / "pkg"
    _tf007(tmp_path)
    f = check_path(pkg / "runner.py", select=["TF007"])[0]
    assert "Trainer [training.py]" in f.message and "num_replicas_in_sync" in f.message


@pytest.mark.parametrize("extra", [
    "\n        batch_multiplier=num_devices,",             # the builder is told the replica count (the authors' fix)
    "\n        num_replicas=len(devices),",
])
def test_builder_told_the_replica_count_is_not_reported(tmp_path, extra):
    assert _tf007(tmp_path, extra=extra) == []


CONSTANT = RUNNER.replace('train_config["batch_size"],{extra}', 'batch_size=BATCH,{extra}').replace(
    "class Runner(object):", "BATCH = 64\n\nclass Runner(object):")


def test_constant_batch_handed_to_the_trainer_is_reported(tmp_path):
    assert _tf007(tmp_path, runner=CONSTANT) == [15]


def test_batch_computed_from_the_device_count_is_not_reported(tmp_path):
    scaled = CONSTANT.replace("    dataset = self._model", "    global BATCH\n    BATCH *= num_devices\n"
                                                           "    dataset = self._model")
    assert _tf007(tmp_path, runner=scaled) == []


@pytest.mark.parametrize("strategy,distribute", [
    ("None", "experimental_distribute_dataset"),          # the trainer makes no strategy
    ("tf.distribute.MirroredStrategy()", "prepare"),      # and one that never distributes the dataset it is given
])
def test_trainer_that_does_not_distribute_under_its_strategy_is_not_reported(tmp_path, strategy, distribute):
    assert _tf007(tmp_path, strategy=strategy, distribute=distribute) == []


def test_pipeline_never_handed_to_the_trainer_is_not_reported(tmp_path):
    runner = RUNNER.replace("trainer(dataset, max_step", "trainer(None, max_step")
    assert _tf007(tmp_path, runner=runner) == []
