import argparse
import tensorflow as tf


class Config:
    batch_size = 32

    def __init__(self, batch_size):
        self.batch_size = batch_size


p = argparse.ArgumentParser()
p.add_argument("--per-replica-batch", type=int, required=True)
args = p.parse_args()
strategy = tf.distribute.MirroredStrategy()
cfg = Config(args.per_replica_batch * strategy.num_replicas_in_sync)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(tf.zeros([64, 8]), tf.zeros([64]), batch_size=cfg.batch_size)
