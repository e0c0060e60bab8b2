import tensorflow as tf

def make_model():
    inp = tf.keras.Input((4,))
    out = tf.keras.layers.Dense(1)(inp)
    return tf.keras.Model(inp, out)

def get_strategy():
    try:
        tpu = tf.distribute.cluster_resolver.TPUClusterResolver()
        return tf.distribute.TPUStrategy(tpu)
    except ValueError:
        return tf.distribute.MirroredStrategy()

strategy = get_strategy()
model = make_model()
with strategy.scope():
    model.compile(optimizer="adam", loss="mse")
model.fit(x, y)
