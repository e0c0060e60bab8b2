import tensorflow as tf

BATCH_SIZE = 32
strategy = tf.distribute.MirroredStrategy()
train_ds = tf.keras.utils.image_dataset_from_directory("data/train", image_size=(224, 224), batch_size=BATCH_SIZE)
train_ds = train_ds.prefetch(tf.data.AUTOTUNE)
with strategy.scope():
    model = tf.keras.applications.ResNet50(weights=None, classes=10)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(train_ds, epochs=2)
