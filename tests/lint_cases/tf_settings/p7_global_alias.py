import tensorflow as tf

per_worker_batch_size = 32


def load(batch_size):
    ds = tf.data.Dataset.from_tensor_slices((tf.zeros([64, 8]), tf.zeros([64])))
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def run_training():
    strategy = tf.distribute.MirroredStrategy()
    global_batch_size = per_worker_batch_size
    train_dataset = load(global_batch_size)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
    model.fit(train_dataset, epochs=1)


run_training()
