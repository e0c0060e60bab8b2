"""Input pipeline with a serial map and no prefetch."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 128 * strategy.num_replicas_in_sync


def parse(record):
    features = tf.io.parse_single_example(record, {"x": tf.io.FixedLenFeature([32], tf.float32),
                                                   "y": tf.io.FixedLenFeature([], tf.int64)})
    return features["x"], features["y"]


files = tf.io.gfile.glob("data/train-*.tfrecord")
dataset = tf.data.TFRecordDataset(files)
dataset = dataset.map(parse)
dataset = dataset.shuffle(10000).batch(GLOBAL_BATCH)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(dataset, epochs=10)
