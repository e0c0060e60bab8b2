"""Horovod: one GPU per process, chosen by the local rank (correct per-process narrowing)."""
import horovod.tensorflow.keras as hvd
import tensorflow as tf

hvd.init()
gpus = tf.config.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

dataset = tf.data.Dataset.from_tensor_slices((tf.random.normal([4096, 32]), tf.zeros([4096], tf.int64)))
dataset = dataset.shard(hvd.size(), hvd.rank()).shuffle(1000).batch(128).prefetch(tf.data.AUTOTUNE)
model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001 * hvd.size()))
model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer=opt)
model.fit(dataset, epochs=5, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)],
          verbose=1 if hvd.rank() == 0 else 0)
