import tensorflow as tf

model = tf.keras.Sequential([  # Incorrect: Model defined outside strategy scope
        tf.keras.layers.Dense(10, activation='relu', input_shape=(100,)),
        tf.keras.layers.Dense(1)
])
optimizer = tf.keras.optimizers.Adam() # Incorrect: Optimizer defined outside strategy scope

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():

    dist_dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((tf.random.uniform((1000, 100), dtype=tf.float32), tf.random.uniform((1000, 1), dtype=tf.float32))).batch(32))
    
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
