import tensorflow as tf
from tensorflow import keras


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real_images):
        noise = tf.random.normal((tf.shape(real_images)[0], self.latent_dim))
        with tf.GradientTape() as tape:
            loss = self.loss_fn(tf.ones((1, 1)), self.discriminator(self.generator(noise)))
        grads = tape.gradient(loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        return {"g_loss": loss}


strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    discriminator = keras.Sequential([keras.layers.Dense(1)])
    generator = keras.Sequential([keras.layers.Dense(8)])
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=8)
gan.compile(
    d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
)
gan.fit(dataset, epochs=1)
