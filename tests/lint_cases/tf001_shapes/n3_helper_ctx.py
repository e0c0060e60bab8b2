import contextlib
import tensorflow as tf

class Trainer:
    def __init__(self):
        self.strategy = tf.distribute.MirroredStrategy()

    @contextlib.contextmanager
    def maybe_scope(self):
        with self.strategy.scope():
            yield

    def train(self, ds):
        with self.maybe_scope():
            self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
            self.opt = tf.keras.optimizers.Adam()
        self.model.compile(optimizer=self.opt, loss="mse")
        self.model.fit(ds)
