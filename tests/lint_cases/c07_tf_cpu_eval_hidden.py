"""Evaluation on CPU: GPUs hidden on purpose with -1; a model built for export is never trained."""
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "-1"

import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
export_model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(4,))])
export_model.load_weights("weights.h5")
export_model.save("exported")

with strategy.scope():
    model = tf.keras.models.load_model("trained.keras")
print(model.evaluate(tf.random.normal([64, 4]), tf.zeros([64, 10]), batch_size=64 * strategy.num_replicas_in_sync))
