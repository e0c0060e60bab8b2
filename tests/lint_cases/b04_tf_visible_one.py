"""Visible devices narrowed to one GPU before the strategy is built."""
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "0"

import tensorflow as tf

gpus = tf.config.list_physical_devices("GPU")
if gpus:
    tf.config.set_visible_devices(gpus[0], "GPU")
    tf.config.experimental.set_memory_growth(gpus[0], True)

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.applications.ResNet50(weights=None, classes=10)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")

ds = tf.data.Dataset.from_tensor_slices((tf.zeros([64, 224, 224, 3]), tf.zeros([64])))
ds = ds.batch(8 * strategy.num_replicas_in_sync).prefetch(tf.data.AUTOTUNE)
model.fit(ds, epochs=1)
