import tensorflow as tf
strategy = tf.distribute.get_strategy()
with strategy.scope():
    emb = tf.keras.layers.Embedding(10, 4)
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
model.fit(ds)
