"""Visible devices set to several GPUs; the single-GPU line is only a comment."""
import os

# os.environ["CUDA_VISIBLE_DEVICES"] = "0"   # uncomment to debug on one GPU
os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

gpus = tf.config.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss="mse")
x = tf.random.normal([1024, 4])
model.fit(x, x @ tf.ones([4, 10]), batch_size=64 * strategy.num_replicas_in_sync, epochs=2)
