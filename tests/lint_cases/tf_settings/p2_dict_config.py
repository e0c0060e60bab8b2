import tensorflow as tf

config = {"batch_size": 32, "epochs": 5, "lr": 1e-3}


def train(config):
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.Adam(config["lr"]), loss="mse")
    model.fit(tf.zeros([64, 8]), tf.zeros([64]), batch_size=config["batch_size"], epochs=config["epochs"])


train(config)
