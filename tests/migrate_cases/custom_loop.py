# A TensorFlow custom training loop in the shape of the tf.distribute guides (written for allgpu's tests):
# per-example losses averaged over the global batch, a tf.function step run by strategy.run, the losses summed.
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

GLOBAL_BATCH_SIZE = 64
strategy = tf.distribute.MirroredStrategy()

digits = load_digits()
x_train = (digits.data[:1437] / 16.0).astype("float32")
y_train = digits.target[:1437].astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(GLOBAL_BATCH_SIZE)
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()


def compute_loss(labels, predictions):
    per_example_loss = loss_object(labels, predictions)
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)


def train_step(inputs):
    features, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(features, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_accuracy.update_state(labels, predictions)
    return loss


@tf.function
def distributed_train_step(inputs):
    per_replica_losses = strategy.run(train_step, args=(inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


for epoch in range(3):
    total_loss, batches = 0.0, 0
    for batch in dist_dataset:
        total_loss += float(distributed_train_step(batch))
        batches += 1
    print(f"epoch {epoch + 1}: loss {total_loss / batches:.4f}")
