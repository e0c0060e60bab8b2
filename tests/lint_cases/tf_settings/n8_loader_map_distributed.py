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


def run(train_dataset, eval_datasets, strategy):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD()
    eval_datasets = {name: strategy.experimental_distribute_dataset(ds) for name, ds in eval_datasets.items()}
    train_iterator = iter(strategy.experimental_distribute_dataset(train_dataset))
    for _ in range(3):
        train_step(model, strategy, train_iterator, optimizer)
        for name, ds in eval_datasets.items():
            train_step(model, strategy, iter(ds), optimizer)


def main():
    strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())
    train_dataset = ToyDataset(split="train").load(batch_size=GB).map(lambda x: (x["features"], x["labels"]))
    with strategy.scope():
        eval_datasets = {}
        eval_datasets["test"] = ToyDataset(split="test").load(batch_size=GB).map(lambda x: (x["features"], x["labels"]))
        run(train_dataset=train_dataset, eval_datasets=eval_datasets, strategy=strategy)


main()
