"""CentralStorageStrategy with Keras fit and an image pipeline read from disk."""
import tensorflow as tf

strategy = tf.distribute.experimental.CentralStorageStrategy()
BATCH = 32 * strategy.num_replicas_in_sync
AUTOTUNE = tf.data.AUTOTUNE

train_ds = tf.keras.utils.image_dataset_from_directory("images/train", image_size=(180, 180), batch_size=BATCH)
val_ds = tf.keras.utils.image_dataset_from_directory("images/val", image_size=(180, 180), batch_size=BATCH)
normalize = tf.keras.layers.Rescaling(1.0 / 255)
train_ds = train_ds.map(lambda x, y: (normalize(x), y), num_parallel_calls=AUTOTUNE).cache().prefetch(AUTOTUNE)
val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(5),
    ])
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
history = model.fit(train_ds, validation_data=val_ds, epochs=10,
                    callbacks=[tf.keras.callbacks.ModelCheckpoint("ckpt/{epoch}.keras")])
