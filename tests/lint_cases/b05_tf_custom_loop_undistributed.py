"""Custom loop: strategy.run fed straight from a tf.data pipeline."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
PER_REPLICA = 64
GLOBAL_BATCH = PER_REPLICA * strategy.num_replicas_in_sync

(x, y), _ = tf.keras.datasets.mnist.load_data()
train_ds = (tf.data.Dataset.from_tensor_slices((x[..., None] / 255.0, y))
            .shuffle(60000)
            .map(lambda a, b: (tf.cast(a, tf.float32), b), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(GLOBAL_BATCH)
            .prefetch(tf.data.AUTOTUNE))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.nn.compute_average_loss(loss_obj(labels, logits), global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(inputs):
    per_replica = strategy.run(train_step, args=(inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


for epoch in range(3):
    for batch in train_ds:
        distributed_train_step(batch)
