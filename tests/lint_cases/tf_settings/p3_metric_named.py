import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GB = 32 * strategy.num_replicas_in_sync
auc = tf.keras.metrics.AUC()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", metrics=[auc])
model.fit(tf.zeros([64, 8]), tf.zeros([64]), batch_size=GB)
