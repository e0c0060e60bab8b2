import tensorflow as tf

def make_generator():
    return tf.keras.Sequential([tf.keras.layers.Dense(10)])

def make_discriminator():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    generator = make_generator()
    discriminator = make_discriminator()
    g_opt = tf.keras.optimizers.Adam(1e-4)
d_opt = tf.keras.optimizers.Adam(1e-4)

@tf.function
def train_step(x):
    def step(x):
        with tf.GradientTape() as gt, tf.GradientTape() as dt:
            fake = generator(x)
            gl = tf.reduce_mean(discriminator(fake))
            dl = -gl
        g_opt.apply_gradients(zip(gt.gradient(gl, generator.trainable_variables), generator.trainable_variables))
        d_opt.apply_gradients(zip(dt.gradient(dl, discriminator.trainable_variables), discriminator.trainable_variables))
    strategy.run(step, args=(x,))

for x in ds:
    train_step(x)
