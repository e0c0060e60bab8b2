import tensorflow as tf
strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(ds)
