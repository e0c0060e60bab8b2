import tensorflow as tf
import numpy as np

# Assuming a single batch loading function
def load_data(batch_size):
    data = np.random.rand(1000, 100).astype(np.float32) # 1000 examples, 100 features
    labels = np.random.rand(1000, 1).astype(np.float32) # 1000 labels
    dataset = tf.data.Dataset.from_tensor_slices((data, labels))
    dataset = dataset.batch(batch_size)
    return dataset

strategy = tf.distribute.MirroredStrategy()

BATCH_SIZE = 32
dataset = load_data(BATCH_SIZE) # single loading pipeline
dist_dataset = strategy.experimental_distribute_dataset(dataset) # Apply strategy

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(10, activation='relu', input_shape=(100,)),
        tf.keras.layers.Dense(1)
    ])
    optimizer = tf.keras.optimizers.Adam()
    
    def train_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
          predictions = model(features)
          loss = tf.keras.losses.MeanSquaredError()(labels, predictions)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    for epoch in range(10):
        for x in dist_dataset:
            strategy.run(train_step, args=(x,))

