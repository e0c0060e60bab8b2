"""A model built by a helper, inside a scope held in a variable."""
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers


def build_model(input_dim, num_classes):
    model = keras.Sequential([layers.Dense(256, activation="relu", input_shape=(input_dim,)),
                              layers.Dropout(0.2),
                              layers.Dense(num_classes)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main():
    strategy = tf.distribute.MirroredStrategy()
    strategy_scope = strategy.scope()
    batch = 256 * strategy.num_replicas_in_sync
    with strategy_scope:
        model = build_model(100, 5)
    x = tf.random.normal([4096, 100])
    y = tf.random.uniform([4096], maxval=5, dtype=tf.int64)
    model.fit(x, y, batch_size=batch, epochs=3)


if __name__ == "__main__":
    main()
