"""A lookup table pinned to GPU 0 on purpose; training runs under the strategy."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
with tf.device("/gpu:0"):
    table = tf.constant(tf.random.normal([1000, 16]))
    norms = tf.norm(table, axis=1)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16)])
    model.compile(optimizer="sgd", loss="mse")

ds = tf.data.Dataset.from_tensor_slices((table, table)).batch(32 * strategy.num_replicas_in_sync)
model.fit(ds.prefetch(tf.data.AUTOTUNE), epochs=1)
