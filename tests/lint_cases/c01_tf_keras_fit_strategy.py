"""Keras fit under MirroredStrategy: no distribute_dataset, strategy.run or compute_average_loss needed."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
print("replicas:", strategy.num_replicas_in_sync)
BATCH_PER_REPLICA = 64
GLOBAL_BATCH = BATCH_PER_REPLICA * strategy.num_replicas_in_sync


def scale(image, label):
    return tf.cast(image, tf.float32) / 255.0, label


(x, y), _ = tf.keras.datasets.mnist.load_data()
train = (tf.data.Dataset.from_tensor_slices((x[..., None], y))
         .map(scale, num_parallel_calls=tf.data.AUTOTUNE)
         .cache()
         .shuffle(10000)
         .batch(GLOBAL_BATCH)
         .prefetch(tf.data.AUTOTUNE))

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(),
                  metrics=["accuracy"])

model.fit(train, epochs=12)
model.save("saved_model")
