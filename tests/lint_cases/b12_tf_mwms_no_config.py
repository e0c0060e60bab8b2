"""Multi-worker training script that never configures the cluster."""
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL_BATCH = 64 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss="mse")

ds = tf.data.Dataset.from_tensor_slices((tf.ones([1024, 8]), tf.ones([1024, 10])))
model.fit(ds.batch(GLOBAL_BATCH).prefetch(tf.data.AUTOTUNE), epochs=3)
