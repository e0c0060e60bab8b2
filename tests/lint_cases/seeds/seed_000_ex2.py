import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

model = tf.keras.Sequential([ # Model created OUTSIDE the strategy scope!
    tf.keras.layers.Dense(128, activation='relu', input_shape=(784,)),
    tf.keras.layers.Dense(10)
])
model.compile(optimizer='adam',
              loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True),
              metrics=['accuracy'])

# ... data loading and preprocessing as in Example 1 ...

model.fit(x_train, y_train, epochs=10, batch_size=32)
