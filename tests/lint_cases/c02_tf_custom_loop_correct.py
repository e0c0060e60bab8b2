"""The tf.distribute custom training loop, done right."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
BATCH_SIZE_PER_REPLICA = 64
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
EPOCHS = 10

(train_images, train_labels), _ = tf.keras.datasets.fashion_mnist.load_data()
train_images = train_images[..., None] / 255.0
train_dataset = (tf.data.Dataset.from_tensor_slices((train_images, train_labels))
                 .shuffle(60000).batch(GLOBAL_BATCH_SIZE).prefetch(tf.data.AUTOTUNE))
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)


def create_model():
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
    ])


with strategy.scope():
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

    def compute_loss(labels, predictions):
        per_example_loss = loss_object(labels, predictions)
        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)

    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    model = create_model()
    optimizer = tf.keras.optimizers.Adam()
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_accuracy.update_state(labels, predictions)
    return loss


@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


for epoch in range(EPOCHS):
    total_loss, num_batches = 0.0, 0
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
        num_batches += 1
    print(f"epoch {epoch + 1}: loss {total_loss / num_batches}, acc {train_accuracy.result()}")
    train_accuracy.reset_state()
    checkpoint.save("ckpt/ckpt")
