import tensorflow as tf


def plain_train(optimizer, dataset):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))


def keras_train(dataset):
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
    model.fit(dataset)


def main(mode):
    if mode == "eager":
        optimizer = tf.keras.optimizers.Adam()
        plain_train(optimizer, ds)
    else:
        keras_train(ds)


main("eager")
