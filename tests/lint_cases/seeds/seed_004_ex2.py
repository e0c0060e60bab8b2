import tensorflow as tf

with tf.device('/gpu:0'):
  a = tf.random.normal((5000, 5000), dtype=tf.float32)
  b = tf.matmul(a, a)

with tf.device('/gpu:1'):
  c = tf.random.normal((5000, 5000), dtype=tf.float32)
  d = tf.matmul(c, c)

# This operation will likely run on CPU or GPU 0 due to data transfer overhead.
e = tf.add(b, d)
