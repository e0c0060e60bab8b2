"""A strategy exists, but the custom step is called directly in the loop."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 32 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam()

dataset = tf.data.Dataset.from_tensor_slices(
    (tf.random.normal([1024, 16]), tf.random.normal([1024, 1]))).batch(GLOBAL_BATCH).prefetch(2)
dist_dataset = strategy.experimental_distribute_dataset(dataset)


@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        pred = model(features, training=True)
        loss = tf.reduce_sum(tf.square(pred - labels)) / GLOBAL_BATCH
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(5):
    for features, labels in dataset:
        train_step(features, labels)
