import tensorflow as tf


def make_generator_model():
    return tf.keras.Sequential([tf.keras.layers.Dense(8)])


def make_discriminator_model():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])


strategy = tf.distribute.MirroredStrategy()
generator = make_generator_model()
with strategy.scope():
    discriminator = make_discriminator_model()
    generator_optimizer = tf.keras.optimizers.Adam(1e-4)
    discriminator_optimizer = tf.keras.optimizers.Adam(1e-4)


def train_step(images):
    noise = tf.random.normal([64, 100])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake = generator(noise, training=True)
        gen_loss = -tf.reduce_mean(discriminator(fake, training=True))
        disc_loss = tf.reduce_mean(discriminator(fake, training=True)) - tf.reduce_mean(discriminator(images))
    generator_optimizer.apply_gradients(zip(gen_tape.gradient(gen_loss, generator.trainable_variables),
                                            generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(disc_tape.gradient(disc_loss, discriminator.trainable_variables),
                                                discriminator.trainable_variables))


@tf.function
def distributed_train_step(images):
    strategy.run(train_step, args=(images,))


for images in strategy.experimental_distribute_dataset(dataset):
    distributed_train_step(images)
