import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
  model = tf.keras.Sequential(...) # Define model as in Example 1

  optimizer = tf.keras.optimizers.Adam()
  accumulation_steps = 2

  def train_step(images, labels):
    with tf.GradientTape() as tape:
      predictions = model(images)
      loss = tf.keras.losses.CategoricalCrossentropy(from_logits=True)(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))

  for epoch in range(epochs):
    for batch in dataset:
      for step in range(accumulation_steps):
        train_step(batch[0], batch[1])
