"""A GAN-shaped keras.Model (sub-models as attributes, no call(), a train_step that calls its parts: keras-io's
DCGAN moved from TensorFlow) given to fit under a strategy: without `self.built = True` Keras 3 cannot build it,
and allgpu said so with a bare NotImplementedError from Keras's Model.call; now a typed error naming the fix."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import torch  # noqa: E402

import allgpu  # noqa: E402
from allgpu.errors import UnsupportedError  # noqa: E402

pytestmark = pytest.mark.unit


class GAN(keras.Model):
    def __init__(self, discriminator, generator, built):
        super().__init__()
        self.discriminator, self.generator = discriminator, generator
        if built:
            self.built = True  # keras-io's Keras 3 GAN

    def train_step(self, real):
        real = real[0] if isinstance(real, tuple) else real
        fake = self.generator(keras.ops.sin(real[:, :2]))
        self.zero_grad()
        d_loss = keras.ops.mean(keras.ops.square(self.discriminator(keras.ops.concatenate([fake, real]))))
        d_loss.backward()
        with torch.no_grad():
            self.optimizer.apply([v.value.grad for v in self.discriminator.trainable_weights],
                                 self.discriminator.trainable_weights)
        return {"d_loss": d_loss}


def _gan(built: bool):
    disc = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    gen = keras.Sequential([keras.Input((2,)), keras.layers.Dense(4)])
    gan = GAN(disc, gen, built)
    gan.compile(optimizer="sgd")
    return gan


def test_a_gan_without_call_gets_the_fix_and_trains_with_it():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    with strategy.scope():
        unbuilt = _gan(built=False)
    with pytest.raises(UnsupportedError, match=r"GAN defines no call\(\).*self.built = True"):
        unbuilt.fit(x, batch_size=8, epochs=1, verbose=0)
    with strategy.scope():
        gan = _gan(built=True)
    history = gan.fit(x, batch_size=8, epochs=2, verbose=0)
    assert len(history.history["d_loss"]) == 2
