import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(10, activation='relu', input_shape=(784,)),
      tf.keras.layers.Dense(10)
  ])

  optimizer = tf.keras.optimizers.Adam(0.01)
  loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True)

# Convert data into tensorflow datasets
(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
x_train = x_train.reshape(-1, 784).astype('float32') / 255.0
y_train = tf.keras.utils.to_categorical(y_train, num_classes=10)

dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(128)
distributed_dataset = strategy.experimental_distribute_dataset(dataset)

@tf.function
def train_step(inputs, labels):
    with tf.GradientTape() as tape:
      predictions = model(inputs)
      loss = loss_fn(labels, predictions)

    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

for epoch in range(2):
  for inputs, labels in distributed_dataset:
     loss = strategy.run(train_step, args=(inputs, labels))
     print(f"Epoch: {epoch}, Loss: {loss}")
