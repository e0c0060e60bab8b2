"""`allgpu migrate` on TF2-era spellings found migrating scripts others wrote: `@tf.function` given only tracing
hints, and `from tensorflow.keras.X import name` of a name Keras 3 no longer has (`multi_gpu_model`)."""

import importlib.util
import textwrap

import pytest

from allgpu.migrate import migrate_source
from allgpu.migrate.notes import CHANGED, NOT_CONVERTED


def _migrate(code: str):
    return migrate_source(textwrap.dedent(code), "s.py")


def _kinds(migration, kind):
    return [(n.line, n.message) for n in migration.notes if n.kind == kind]


def test_tf_function_with_only_tracing_hints_is_removed_like_a_bare_one():
    m = _migrate("""\
        import tensorflow as tf

        @tf.function(experimental_relax_shapes=True)
        def a(x):
            return x

        @tf.function(reduce_retracing=True, autograph=False)
        def b(x):
            return x

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)], reduce_retracing=True)
        def c(x):
            return x
        """)
    assert "relax_shapes" not in m.result and "reduce_retracing=True, autograph" not in m.result
    assert "@tf.function(input_signature" in m.result  # a signature constrains calls: not only a hint
    changed = dict(_kinds(m, CHANGED))
    assert "experimental_relax_shapes only steered its tracing" in changed[3]
    assert "reduce_retracing, autograph only steered" in changed[7]
    left = _kinds(m, NOT_CONVERTED)
    assert {line for line, _ in left} == {11} and any("tf.function with arguments" in why for _, why in left)


def test_a_from_import_of_a_name_keras3_dropped_is_kept_and_reported():
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed: nothing to check the names against")
    m = _migrate("""\
        import tensorflow as tf
        from tensorflow.keras.utils import multi_gpu_model, to_categorical
        from tensorflow.keras.layers import Dense, Conv2D
        model = tf.keras.Sequential([Dense(1)])
        parallel = multi_gpu_model(model, gpus=2)
        """)
    assert "from tensorflow.keras.utils import multi_gpu_model, to_categorical" in m.result  # not a failing import
    assert "from keras.layers import Dense, Conv2D" in m.result  # names Keras 3 has are converted
    (line, why), = _kinds(m, NOT_CONVERTED)
    assert line == 2 and "multi_gpu_model" in why and "scope()" in why


def test_raw_ops_with_a_keras_twin_are_rewritten_in_a_train_step_and_kept_in_input_code():
    m = _migrate("""\
        import tensorflow as tf

        def augment(x):
            return tf.concat([x, tf.zeros((2, 1))], axis=0)

        ds = tf.data.Dataset.range(8).map(augment)

        def train_step(self, real):
            batch_size = tf.shape(real)[0]
            z = tf.random.normal(shape=(batch_size, 4))
            labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
            kl = tf.reduce_mean(tf.reduce_sum(tf.square(z) - tf.exp(z), axis=1))
            other = tf.reduce_mean(input_tensor=z)
            return labels, kl, other
        """)
    assert "return tf.concat([x, tf.zeros((2, 1))], axis=0)" in m.result  # input code: TensorFlow runs it
    assert "batch_size = keras.ops.shape(real)[0]" in m.result
    assert "z = keras.random.normal(shape=(batch_size, 4))" in m.result
    assert "keras.ops.concatenate([keras.ops.ones((batch_size, 1)), keras.ops.zeros((batch_size, 1))], axis=0)" in m.result
    assert "keras.ops.mean(keras.ops.sum(keras.ops.square(z) - keras.ops.exp(z), axis=1))" in m.result
    assert "tf.reduce_mean(input_tensor=z)" in m.result  # a keyword the twin names otherwise: left, reported
    assert [line for line, why in _kinds(m, NOT_CONVERTED)] == [13]
    assert "import keras" in m.result


def test_a_model_with_train_step_and_no_call_is_told_it_needs_built():
    m = _migrate("""\
        import tensorflow as tf

        class GAN(tf.keras.Model):
            def __init__(self, discriminator, generator):
                super().__init__()
                self.discriminator, self.generator = discriminator, generator

            def train_step(self, data):
                return {}

        class Ready(tf.keras.Model):
            def __init__(self, generator):
                super().__init__()
                self.generator = generator
                self.built = True

            def train_step(self, data):
                return {}

        class Callable(tf.keras.Model):
            def call(self, x):
                return x

            def train_step(self, data):
                return {}
        """)
    (line, why), = _kinds(m, NOT_CONVERTED)
    assert line == 3 and "class GAN" in why and "self.built = True" in why
