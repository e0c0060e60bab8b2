"""Keras fit under MirroredStrategy with a batch size tuned for one GPU."""
import tensorflow as tf

BATCH_SIZE = 64

strategy = tf.distribute.MirroredStrategy()
print("replicas:", strategy.extended.worker_devices)


def preprocess(image, label):
    return tf.image.resize(image, (128, 128)) / 255.0, label


(x, y), _ = tf.keras.datasets.cifar10.load_data()
train = tf.data.Dataset.from_tensor_slices((x, y))
train = train.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)

with strategy.scope():
    model = tf.keras.applications.MobileNetV2(input_shape=(128, 128, 3), weights=None, classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

model.fit(train, epochs=3)
