import tensorflow as tf


def train(model, opt, dataset, strategy):
    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        strategy.run(replica, args=(x, y))
    for x, y in strategy.experimental_distribute_dataset(dataset):
        step(x, y)


def main():
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam()
    train(model, optimizer, ds, strategy)


main()
