import tensorflow as tf

class Runner:
    def __init__(self, strategy):
        self.strategy = strategy

    def train(self, ds):
        with self.strategy.scope():
            self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
            self.model.compile(optimizer="adam", loss="mse")
        self.model.fit(ds)

    def export(self, path):
        serving = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        serving.set_weights(self.model.get_weights())
        serving.save(path)

    def evaluate(self, ds):
        m = tf.keras.models.load_model("ckpt")
        return m.evaluate(ds)
