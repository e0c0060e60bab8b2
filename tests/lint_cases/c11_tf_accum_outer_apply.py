"""Accumulation over an inner micro-batch loop, applied once after it."""
import tensorflow as tf

ACCUM = 8
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.build((None, 4))
optimizer = tf.keras.optimizers.SGD(0.01)
data = tf.data.Dataset.from_tensor_slices(tf.random.normal([1024, 4])).batch(8).prefetch(tf.data.AUTOTUNE)

for big_batch in data.batch(ACCUM):
    accumulated = [tf.zeros_like(v) for v in model.trainable_variables]
    for micro in tf.split(big_batch, ACCUM):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(micro) ** 2) / ACCUM
        grads = tape.gradient(loss, model.trainable_variables)
        accumulated = [a + g for a, g in zip(accumulated, grads)]
    optimizer.apply_gradients(zip(accumulated, model.trainable_variables))
