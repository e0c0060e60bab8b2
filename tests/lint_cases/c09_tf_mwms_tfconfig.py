"""Multi-worker training with TF_CONFIG set from the launcher's arguments."""
import json
import os
import sys

import tensorflow as tf

workers = sys.argv[1].split(",")
index = int(sys.argv[2])
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch = 64 * strategy.num_replicas_in_sync
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss="mse")
ds = tf.data.Dataset.from_tensor_slices((tf.ones([4096, 8]), tf.ones([4096, 10])))
model.fit(ds.batch(global_batch).prefetch(tf.data.AUTOTUNE), epochs=3, steps_per_epoch=20)
