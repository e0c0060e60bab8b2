import tensorflow as tf


def evaluate(model, dataset):
    return model.evaluate(dataset)


def train(model, dataset):
    model.fit(dataset)


strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
train(model, ds)
reference = tf.keras.models.load_model("reference")
evaluate(reference, ds)
