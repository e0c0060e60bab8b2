"""Gradient accumulation done right: apply once every accum_steps micro-batches."""
import tensorflow as tf

accum_steps = 4
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
model.build((None, 20))
optimizer = tf.keras.optimizers.Adam()
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.random.normal([512, 20]), tf.zeros([512], tf.int64))).batch(16).prefetch(tf.data.AUTOTUNE)
accum_grads = [tf.zeros_like(v) for v in model.trainable_variables]

for epoch in range(3):
    for step, (x, y) in enumerate(dataset):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) / accum_steps
        grads = tape.gradient(loss, model.trainable_variables)
        accum_grads = [a + g for a, g in zip(accum_grads, grads)]
        if (step + 1) % accum_steps == 0:
            optimizer.apply_gradients(zip(accum_grads, model.trainable_variables))
            accum_grads = [tf.zeros_like(v) for v in model.trainable_variables]
