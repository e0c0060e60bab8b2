"""strategy.run driven from eager Python: neither step is a tf.function."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 32 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)

ds = tf.data.Dataset.from_tensor_slices((tf.ones([256, 4]), tf.ones([256, 1])))
dist_ds = strategy.experimental_distribute_dataset(ds.batch(GLOBAL_BATCH).prefetch(tf.data.AUTOTUNE))


def replica_step(x, y):
    with tf.GradientTape() as tape:
        per_example = tf.reduce_sum(tf.square(model(x) - y), axis=-1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(2):
    for x, y in dist_ds:
        losses = strategy.run(replica_step, args=(x, y))
