import tensorflow as tf
import os

os.environ['CUDA_VISIBLE_DEVICES'] = "0,1" # Specify visible GPUs

try:
    strategy = tf.distribute.MirroredStrategy()
    # ... (Rest of the code as in Example 1) ...
except RuntimeError as e:
    print(f"Error during MirroredStrategy initialization: {e}")
    print("Falling back to single GPU.")
    strategy = tf.distribute.OneDeviceStrategy(device="/gpu:0")
    # ... (Rest of the code, adapted for single-GPU use) ...

