"""A TensorFlow-style Keras script on every device with allgpu: only the strategy line differs from tf.distribute.

    python examples/keras_digits.py                 # 2 CPU replicas (or one per GPU: MirroredStrategy())
    python examples/keras_digits.py --replicas 4
    python examples/keras_digits.py --strategy fully_sharded   # each replica holds ~1/N of weights and Adam state

Trains a small CNN on scikit-learn's bundled handwritten digits (1,797 real 8x8 images, no download) with
model.fit at a global batch of 64 split across the replicas, prints progress on replica 0 only, and exits with
status 1 below 0.95 test accuracy.
"""

import argparse
import os

os.environ["KERAS_BACKEND"] = "torch"  # Keras 3 on PyTorch; set before the first `import keras`

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import allgpu  # noqa: E402

GLOBAL_BATCH = 64


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--strategy", choices=["mirrored", "fully_sharded"], default="mirrored")
    args = parser.parse_args()

    if args.strategy == "mirrored":
        strategy = allgpu.MirroredStrategy(num_replicas=args.replicas)   # tf.distribute.MirroredStrategy()
    else:
        strategy = allgpu.FullyShardedStrategy(num_replicas=args.replicas)
    keras.utils.set_random_seed(0)
    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]          # (1797, 8, 8, 1), channels last
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                                        stratify=digits.target)

    with strategy.scope():
        model = keras.Sequential([
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.25),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer=keras.optimizers.Adam(2e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

    model.fit(x_train, y_train, batch_size=GLOBAL_BATCH, epochs=args.epochs, validation_split=0.1, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=GLOBAL_BATCH, verbose=0)
    if strategy.is_chief:
        print(f"test accuracy {accuracy:.4f} (loss {loss:.4f}) on {strategy.num_replicas_in_sync} replicas, "
              f"{len(x_test)} held-out images")
    return 0 if accuracy >= 0.95 else 1


if __name__ == "__main__":
    raise SystemExit(main())
