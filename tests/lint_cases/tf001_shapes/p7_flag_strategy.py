import tensorflow as tf
from absl import flags
FLAGS = flags.FLAGS

def build():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])

def main(_):
    if FLAGS.tpu:
        strategy = tf.distribute.TPUStrategy(resolver)
    elif FLAGS.num_gpus > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
    model = build()
    optimizer = tf.keras.optimizers.SGD(0.1)
    with strategy.scope():
        pass
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(ds)
