"""Issue 21, TensorFlow/Keras author-fix tuning half (uncertainty-baselines' diabetic-retinopathy baseline, a0247):
a library loader asked for batches of the per-replica size from the command line, its pipeline passed through
``strategy.experimental_distribute_dataset`` and drawn with ``next(iterator)`` by a training ``strategy.run`` step,
is TF007 like the same loader feeding ``fit``; the evaluation loader distributed beside it is not reported."""

from allgpu.lint import check_source

CUSTOM_LOOP = """
import tensorflow as tf
from absl import flags
import utils

flags.DEFINE_integer(name='batch_size', default=16, help='The training batch size.')
flags.DEFINE_integer(name='eval_batch_size', default=32, help='The validation/test batch size.')
FLAGS = flags.FLAGS


def main(argv):
  strategy = tf.distribute.MirroredStrategy()
  batch_size = {train_batch}
  eval_batch_size = FLAGS.eval_batch_size
  dataset_train_builder = utils.load_retinopathy(split='train')
  dataset_train = dataset_train_builder.load(batch_size=batch_size)
  dataset_train = strategy.experimental_distribute_dataset(dataset_train)
  dataset_test_builder = utils.load_retinopathy(split='test')
  dataset_test = dataset_test_builder.load(batch_size=eval_batch_size)
  dataset_test = strategy.experimental_distribute_dataset(dataset_test)
  with strategy.scope():
    model = utils.build_model()
    optimizer = tf.keras.optimizers.SGD(0.1)

  @tf.function
  def train_step(iterator):
    def step_fn(inputs):
      images, labels = inputs
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(images) - labels)
      grads = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
    strategy.run(step_fn, args=(next(iterator),))

  @tf.function
  def test_step(iterator):
    def step_fn(inputs):
      images, labels = inputs
      return model(images)
    strategy.run(step_fn, args=(next(iterator),))

  train_iterator = iter(dataset_train)
  for step in range(100):
    train_step(train_iterator)
  test_iterator = iter(dataset_test)
  for step in range(10):
    test_step(test_iterator)
"""


def _tf007(src: str) -> list[int]:
    return sorted(f.line for f in check_source(src, "deterministic.py") if f.rule_id == "TF007")


def test_tf007_loader_batch_feeding_a_distributed_training_step():
    src = CUSTOM_LOOP.format(train_batch="FLAGS.batch_size")
    line = next(i + 1 for i, text in enumerate(src.splitlines()) if "dataset_train_builder.load(" in text)
    assert _tf007(src) == [line]  # the training loader only, not the evaluation loader


def test_tf007_loader_batch_scaled_by_the_replica_count_is_left_alone():
    assert _tf007(CUSTOM_LOOP.format(train_batch="FLAGS.batch_size * strategy.num_replicas_in_sync")) == []
