"""Multi-worker custom loop: cluster from TFConfigClusterResolver, per-worker input from a function."""
import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
PER_REPLICA_BATCH = 32
GLOBAL_BATCH = PER_REPLICA_BATCH * strategy.num_replicas_in_sync


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(GLOBAL_BATCH)
    ds = tf.data.Dataset.from_tensor_slices((tf.random.normal([8192, 10]), tf.random.normal([8192, 1])))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(1024).repeat().batch(batch).prefetch(tf.data.AUTOTUNE)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    train_loss = tf.keras.metrics.Mean("train_loss")

dist_ds = strategy.distribute_datasets_from_function(dataset_fn)
iterator = iter(dist_ds)


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_loss.update_state(loss)
        return loss

    return strategy.run(step_fn, args=(next(iterator),))


for epoch in range(3):
    for _ in range(100):
        train_step(iterator)
    print(epoch, train_loss.result().numpy())
    train_loss.reset_state()
