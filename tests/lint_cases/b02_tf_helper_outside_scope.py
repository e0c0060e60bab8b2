"""A builder helper called outside the scope, from main()."""
import tensorflow as tf
from tensorflow import keras


def build_model(num_classes):
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs)


def make_dataset(batch_size):
    (x, y), _ = keras.datasets.cifar10.load_data()
    ds = tf.data.Dataset.from_tensor_slices((x / 255.0, y)).shuffle(10000)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def main():
    strategy = tf.distribute.MirroredStrategy()
    batch = 128 * strategy.num_replicas_in_sync
    model = build_model(10)
    with strategy.scope():
        optimizer = keras.optimizers.Adam(1e-3)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(make_dataset(batch), epochs=5)


if __name__ == "__main__":
    main()
