import tensorflow as tf
import os

# Incorrect: CUDA_VISIBLE_DEVICES might be set globally or undefined,
# leading to TensorFlow only seeing/using one GPU by default

# Example of explicitly setting, this will use only device 1
# os.environ['CUDA_VISIBLE_DEVICES'] = '1'

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = tf.keras.Sequential([
      tf.keras.layers.Dense(10, activation='relu', input_shape=(100,)),
      tf.keras.layers.Dense(1)
    ])
    optimizer = tf.keras.optimizers.Adam()

# This will still execute mostly on a single GPU, if only one is visible
# The mirrored strategy is correctly instaniated, but the device visibility
# is causing the problem.
