"""Custom loop under a strategy with a default-reduction Keras loss."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
BATCH = 64 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.Adam()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

ds = tf.data.Dataset.from_tensor_slices((tf.random.normal([512, 8]), tf.zeros([512], tf.int32)))
dist_ds = strategy.experimental_distribute_dataset(ds.batch(BATCH).prefetch(tf.data.AUTOTUNE))


def step_fn(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def dist_step(x, y):
    return strategy.run(step_fn, args=(x, y))


for x, y in dist_ds:
    dist_step(x, y)
