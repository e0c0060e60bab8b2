import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(ds)
model.save("m")
export_model = tf.keras.models.load_model("m")
export_model.evaluate(test_ds)
export_model.predict(test_ds)
