import os

import tensorflow as tf
from mylib.data import ToyDataset

GB = int(os.environ["GLOBAL_BATCH"])


@tf.function
def train_step(model, strategy, iterator, optimizer):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(model(x)[:, 0] - y), global_batch_size=GB)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for _ in tf.range(10):
        strategy.run(step_fn, args=(next(iterator),))


def run(train_dataset, strategy):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD()
    train_iterator = iter(train_dataset)
    for _ in range(3):
        train_step(model, strategy, train_iterator, optimizer)


def main():
    strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())
    train_dataset = ToyDataset(split="train").load(batch_size=GB).map(lambda x: (x["features"], x["labels"]))
    with strategy.scope():
        run(train_dataset=train_dataset, strategy=strategy)


main()
