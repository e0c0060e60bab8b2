import tensorflow as tf

class Trainer:
    def __init__(self):
        self.strategy = tf.distribute.MirroredStrategy()

    def build_model(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")

    def train(self, ds):
        self.model.fit(ds)

trainer = Trainer()
with trainer.strategy.scope():
    trainer.build_model()
trainer.train(ds)
