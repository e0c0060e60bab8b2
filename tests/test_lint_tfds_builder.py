"""Issue 21, TensorFlow/Keras author-fix tuning half (tensorflow/compression's HiFiC, a0243): a pipeline made by a
TensorFlow Datasets builder (``tfds.builder(name).as_dataset(split=...)``) is a tf.data pipeline like ``tfds.load``'s,
so its serial ``map`` is TF009, and a pipeline a method returns (``self._get_dataset(...)``) is followed."""

from allgpu.lint import check_source

HIFIC_LIKE = """
import tensorflow.compat.v1 as tf
import tensorflow_datasets as tfds


class Model:
  def build_input(self, batch_size):
    def _batch_to_dict(batch):
      return dict(input_image=batch)
    dataset = self._get_dataset(batch_size)
    return dataset.map(_batch_to_dict{par})

  def _get_dataset(self, batch_size):
    builder = tfds.builder("coco2014", data_dir="/tmp")
    builder.download_and_prepare()
    dataset = builder.as_dataset(split="train")
    dataset = dataset.map(_preprocess{par})
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(2)
"""


def _tf009_lines(src: str) -> list[int]:
    return sorted(f.line for f in check_source(src, "model.py") if f.rule_id == "TF009")


def test_tf009_map_on_a_tfds_builder_pipeline():
    """Both serial maps are reported: the preprocessing on the builder's pipeline and the one on what the
    method returns; with num_parallel_calls neither is."""
    src = HIFIC_LIKE.format(par="")
    lines = src.splitlines()
    want = [i + 1 for i, line in enumerate(lines) if ".map(" in line]
    assert _tf009_lines(src) == want
    assert _tf009_lines(HIFIC_LIKE.format(par=", num_parallel_calls=tf.data.AUTOTUNE")) == []


def test_as_dataset_of_something_else_is_not_a_pipeline():
    """``as_dataset`` of an object not made by ``tfds.builder`` (another library's) says nothing."""
    src = "import tensorflow as tf\nimport mylib\nsource = mylib.open('x')\nds = source.as_dataset()\nds = ds.map(f)\n"
    assert _tf009_lines(src) == []
