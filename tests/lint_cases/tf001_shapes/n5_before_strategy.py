import tensorflow as tf
baseline = tf.keras.Sequential([tf.keras.layers.Dense(1)])
baseline.compile(optimizer="adam", loss="mse")
baseline.fit(ds)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(ds)
