import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GB = 32 * strategy.num_replicas_in_sync
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(tf.zeros([64, 8]), tf.zeros([64]), batch_size=GB)

auc = tf.keras.metrics.AUC()
auc.update_state(tf.zeros([64]), model.predict(tf.zeros([64, 8]))[:, 0])
print(auc.result())
