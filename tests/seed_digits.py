"""scikit-learn's digits in MNIST's shapes: the seeds' examples load MNIST, which the tests may not download.

``load_data()`` returns ``((x_train, y_train), (x_test, y_test))`` as ``keras.datasets.mnist.load_data()`` does:
``uint8`` images ``(n, 28, 28)`` in 0..255 and ``uint8`` labels ``(n,)``. Each 8x8 digit (0..16) is scaled to
0..255 and padded with 10 zero pixels on every side; the first 1437 of the 1797 digits train, the last 360 test.
A documented substitution of tests/test_seeds.py: the seeds' ``reshape(60000, 784)`` becomes ``reshape(-1, 784)``.
"""

from __future__ import annotations

import numpy as np

N_TRAIN = 1437


def load_data():
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.clip(digits.images * 16, 0, 255).astype(np.uint8)  # (1797, 8, 8), 0..16 -> 0..255
    images = np.pad(images, ((0, 0), (10, 10), (10, 10)))           # (1797, 28, 28), MNIST's size
    labels = digits.target.astype(np.uint8)
    return (images[:N_TRAIN], labels[:N_TRAIN]), (images[N_TRAIN:], labels[N_TRAIN:])


def held_out(features: int = 784):
    """The held-out digits, flattened and scaled: ``(x (360, features) float32, y (360,))``; 784 features as the
    seeds scale MNIST (/255), 64 as scikit-learn's 8x8 digits (/16, tests/migrate_cases)."""
    if features == 64:
        from sklearn.datasets import load_digits

        digits = load_digits()
        return (digits.data[N_TRAIN:] / 16.0).astype("float32"), digits.target[N_TRAIN:]
    _, (x, y) = load_data()
    return x.reshape(-1, 784).astype("float32") / 255, y
