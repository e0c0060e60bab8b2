"""A trainer class that builds everything under the scope in __init__."""
import tensorflow as tf


class Trainer:
    def __init__(self, strategy, lr=1e-3):
        self.strategy = strategy
        self.global_batch = 32 * strategy.num_replicas_in_sync
        with strategy.scope():
            self.model = tf.keras.applications.EfficientNetB0(weights=None, classes=100)
            self.optimizer = tf.keras.optimizers.Adam(lr)
            self.loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(
                reduction=tf.keras.losses.Reduction.NONE)

    def replica_step(self, images, labels):
        with tf.GradientTape() as tape:
            per_example = self.loss_obj(labels, self.model(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.global_batch)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    @tf.function
    def distributed_step(self, images, labels):
        losses = self.strategy.run(self.replica_step, args=(images, labels))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    def fit(self, dist_dataset, epochs):
        for epoch in range(epochs):
            for images, labels in dist_dataset:
                self.distributed_step(images, labels)


def input_fn(input_context):
    batch = input_context.get_per_replica_batch_size(256)
    ds = tf.data.Dataset.from_tensor_slices((tf.zeros([512, 224, 224, 3]), tf.zeros([512], tf.int64)))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(batch).prefetch(tf.data.AUTOTUNE)


strategy = tf.distribute.MirroredStrategy()
trainer = Trainer(strategy)
trainer.fit(strategy.distribute_datasets_from_function(input_fn), epochs=2)
