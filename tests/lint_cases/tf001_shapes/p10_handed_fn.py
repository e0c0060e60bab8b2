import tensorflow as tf
from official.common import distribute_utils

def run(flags_obj):
    strategy = distribute_utils.get_distribution_strategy(distribution_strategy=flags_obj.distribution_strategy,
                                                          num_gpus=flags_obj.num_gpus)
    model = tf.keras.applications.ResNet50(weights=None)
    with strategy.scope():
        optimizer = tf.keras.optimizers.SGD(0.1)
        model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    model.fit(train_ds, epochs=2)
