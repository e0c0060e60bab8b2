import tensorflow as tf

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver)

with strategy.scope():
  # Define model and training loop similar to previous examples,
  # but adapted for distributed training across multiple machines.
  # Requires appropriate configuration of TF_CONFIG environment variable.
  model = tf.keras.Sequential(...)
  ...
