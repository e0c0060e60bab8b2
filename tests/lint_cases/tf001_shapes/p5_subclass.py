import tensorflow as tf

class MyModel(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.d = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.d(x)

def main():
    strategy = tf.distribute.MirroredStrategy()
    model = MyModel()
    with strategy.scope():
        model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
    model.fit(ds, epochs=3)

if __name__ == "__main__":
    main()
