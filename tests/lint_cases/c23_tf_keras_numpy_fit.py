"""Keras fit on NumPy arrays under MirroredStrategy with a scaled global batch."""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
global_batch = 128 * strategy.num_replicas_in_sync
x = np.random.rand(10000, 32).astype("float32")
y = np.random.randint(0, 2, size=(10000,))
with strategy.scope():
    inputs = tf.keras.Input(shape=(32,))
    hidden = tf.keras.layers.Dense(64, activation="relu")(inputs)
    outputs = tf.keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.RMSprop(), loss="binary_crossentropy",
                  metrics=[tf.keras.metrics.AUC()])
model.fit(x, y, batch_size=global_batch, epochs=5, validation_split=0.1)
