import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
  # Model definition
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(1024, activation='relu'),
      tf.keras.layers.Dense(10)
  ])

  # Compile the model
  model.compile(optimizer='adam',
                loss='mse',
                metrics=['mae'])

  # Train the model
  model.fit(x_train, y_train, epochs=10)
