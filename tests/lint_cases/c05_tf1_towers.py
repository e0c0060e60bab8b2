"""TF1 multi-tower training: variables on /cpu:0, one tower per GPU (the CIFAR-10 multi-GPU example)."""
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()
NUM_GPUS = 4


def tower_loss(images, labels):
    with tf.variable_scope("model", reuse=tf.AUTO_REUSE):
        logits = tf.layers.dense(tf.layers.flatten(images), 10)
    return tf.losses.sparse_softmax_cross_entropy(labels, logits)


def average_gradients(tower_grads):
    averaged = []
    for grads_and_vars in zip(*tower_grads):
        grads = tf.stack([g for g, _ in grads_and_vars])
        averaged.append((tf.reduce_mean(grads, 0), grads_and_vars[0][1]))
    return averaged


with tf.Graph().as_default(), tf.device("/cpu:0"):
    images = tf.placeholder(tf.float32, [None, 32, 32, 3])
    labels = tf.placeholder(tf.int64, [None])
    opt = tf.train.GradientDescentOptimizer(0.1)
    image_splits = tf.split(images, NUM_GPUS)
    label_splits = tf.split(labels, NUM_GPUS)
    tower_grads = []
    for i in range(NUM_GPUS):
        with tf.device("/gpu:%d" % i), tf.name_scope("tower_%d" % i):
            loss = tower_loss(image_splits[i], label_splits[i])
            tower_grads.append(opt.compute_gradients(loss))
    train_op = opt.apply_gradients(average_gradients(tower_grads))
    with tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) as sess:
        sess.run(tf.global_variables_initializer())
