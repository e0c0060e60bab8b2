import tensorflow as tf
from mylib.base import BaseTrainer

class Trainer(BaseTrainer):
    def build_model(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.optimizer = tf.keras.optimizers.Adam()

    def train_step(self, x):
        self.strategy.run(self._step, args=(x,))

    def _step(self, x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(self.model(x))
        self.optimizer.apply_gradients(zip(t.gradient(loss, self.model.trainable_variables), self.model.trainable_variables))
