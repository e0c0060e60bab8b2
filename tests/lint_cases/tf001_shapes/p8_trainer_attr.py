import tensorflow as tf

class Distiller:
    def __init__(self, strategy, teacher_fn, student_fn):
        self.strategy = strategy
        self.teacher = teacher_fn()
        with self.strategy.scope():
            self.student = student_fn()
        self.opt = tf.keras.optimizers.Adam()

    def fit(self, ds):
        dist = self.strategy.experimental_distribute_dataset(ds)
        for x in dist:
            self.strategy.run(self._step, args=(x,))

    def _step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.student(x) - self.teacher(x))
        g = tape.gradient(loss, self.student.trainable_variables)
        self.opt.apply_gradients(zip(g, self.student.trainable_variables))
