import tensorflow as tf

# 1. Define the distribution strategy
strategy = tf.distribute.MirroredStrategy()

# 2. Build the model within the strategy's scope
with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(10, activation='relu', input_shape=(784,)),
      tf.keras.layers.Dense(10)
  ])

  optimizer = tf.keras.optimizers.Adam(0.01)
  loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True)

# 3. Compile the model (usually not necessary if using custom training loop)
model.compile(optimizer=optimizer, loss=loss_fn, metrics=['accuracy'])

# 4. Generate synthetic data for demonstration
(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
x_train = x_train.reshape(-1, 784).astype('float32') / 255.0
y_train = tf.keras.utils.to_categorical(y_train, num_classes=10)

# 5. Train the model
model.fit(x_train, y_train, batch_size=128, epochs=2)
