import tensorflow as tf

config = {"batch_size": 32}
strategy = tf.distribute.MirroredStrategy()
config["batch_size"] *= strategy.num_replicas_in_sync
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(tf.zeros([64, 8]), tf.zeros([64]), batch_size=config["batch_size"])
