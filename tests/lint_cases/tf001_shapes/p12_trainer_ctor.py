import tensorflow as tf


class Trainer:
    def __init__(self, model, optimizer, strategy):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy

    def _replica_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self.model(x) - y) ** 2)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    def fit(self, dataset):
        for x, y in self.strategy.experimental_distribute_dataset(dataset):
            self.strategy.run(self._replica_step, args=(x, y))


strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.Adam()
trainer = Trainer(model, optimizer, strategy)
trainer.fit(ds)
