import tensorflow as tf

with tf.device('/gpu:0'):
  # Create a large tensor
  a = tf.random.normal((10000, 10000), dtype=tf.float32)
  # Perform a matrix multiplication
  b = tf.matmul(a, a)

  # ... further operations on b ...
