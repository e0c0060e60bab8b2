# Keras fit in the shape of the tf.distribute Keras guides (written for allgpu's tests): a functional model built
# and compiled in the scope, fit and evaluate outside it, a callback, validation data split off the arrays.
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")

digits = load_digits()
x = (digits.data / 16.0).astype("float32")
y = digits.target.astype("int64")
x_train, y_train, x_test, y_test = x[:1437], y[:1437], x[1437:], y[1437:]

with strategy.scope():
    inputs = tf.keras.Input(shape=(64,))
    hidden = tf.keras.layers.Dense(32, activation="relu")(inputs)
    outputs = tf.keras.layers.Dense(10)(hidden)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-2),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

stop = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=3)
model.fit(x_train, y_train, batch_size=64, epochs=3, validation_split=0.1, shuffle=False, callbacks=[stop],
          verbose=2)
loss, accuracy = model.evaluate(x_test, y_test, batch_size=64, verbose=0)
print(f"test accuracy {accuracy:.3f}")
