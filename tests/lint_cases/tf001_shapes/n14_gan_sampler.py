import tensorflow as tf
from tensorflow import keras

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    generator = keras.Sequential([keras.layers.Dense(8)])
    generator.compile(optimizer=keras.optimizers.Adam(), loss="mse")
generator.fit(dataset, epochs=1)
generator.save("gen.keras")

sampler = keras.models.load_model("gen.keras")
images = sampler.predict(tf.random.normal((16, 100)))
