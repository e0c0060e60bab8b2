"""Training wrapped in tf.device('/GPU:0') on a machine with several GPUs."""
import tensorflow as tf

gpus = tf.config.list_physical_devices("GPU")
NUM_GPUS = len(gpus)
print(f"found {NUM_GPUS} GPUs")

(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
x_train = x_train.reshape(-1, 784).astype("float32") / 255

with tf.device("/GPU:0"):
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(512, activation="relu", input_shape=(784,)),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train, y_train, epochs=5, batch_size=256 * NUM_GPUS)
