"""'Gradient accumulation' that still applies gradients on every micro-batch (seed 003, example 2)."""
import tensorflow as tf

accumulation_steps = 4
model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)])
optimizer = tf.keras.optimizers.Adam()
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

dataset = tf.data.Dataset.from_tensor_slices(
    (tf.random.normal([256, 20]), tf.zeros([256], tf.int64))).batch(16).prefetch(tf.data.AUTOTUNE)


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))


for epoch in range(3):
    for images, labels in dataset:
        for step in range(accumulation_steps):
            train_step(images, labels)
