import tensorflow as tf

class Trainer:
    def __init__(self, cfg):
        self.strategy = tf.distribute.MirroredStrategy()
        self.cfg = cfg

    def build_model(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def train(self, ds):
        self.build_model()
        with self.strategy.scope():
            self.loss = tf.keras.losses.MeanSquaredError()
        self.model.compile(optimizer=self.optimizer, loss="mse")
        self.model.fit(ds)
