"""TensorFlow/Keras rules: each must fire on its pitfall and stay quiet on the near-misses of issue 3."""

import pytest
from tests.lint_helpers import ALL_RULES, ids

HEAD = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nB = 64 * strategy.num_replicas_in_sync\n"


# ---- TF001 created outside scope ----------------------------------------------------------------------
def test_tf001_model_outside_scope():
    assert "TF001" in ids(HEAD + "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
                                 "model.compile('adam', 'mse')\nmodel.fit(x, y, batch_size=B)\n")


def test_tf001_resolves_from_import_alias():
    src = ("from tensorflow import keras\nimport tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
           "m = keras.models.Sequential()\nm.fit(x, y)\n")
    assert "TF001" in ids(src)


def test_tf001_optimizer_outside_scope_custom_loop():
    src = HEAD + """
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.Adam()
def step(x):
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(model(x))
    opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
"""
    assert "TF001" in ids(src)


def test_tf001_quiet_helper_called_in_scope():
    src = HEAD + """
def build():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
with strategy.scope():
    model = build()
model.fit(x, y, batch_size=B)
"""
    assert "TF001" not in ids(src)


def test_tf001_quiet_class_init_builds_in_scope():
    src = HEAD + """
class Trainer:
    def __init__(self):
        with strategy.scope():
            self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    def train(self):
        self.model.fit(x, y, batch_size=B)
t = Trainer()
t.train()
"""
    assert "TF001" not in ids(src)


def test_tf001_quiet_scope_held_in_variable():
    src = HEAD + "strategy_scope = strategy.scope()\nwith strategy_scope:\n    model = tf.keras.Sequential()\nmodel.fit(x, y)\n"
    assert "TF001" not in ids(src)


def test_tf001_quiet_model_never_trained():
    src = HEAD + "export = tf.keras.Sequential([tf.keras.layers.Dense(1)])\nexport.save('out')\n"
    assert "TF001" not in ids(src)


def test_tf001_quiet_without_strategy():
    assert "TF001" not in ids("import tensorflow as tf\nm = tf.keras.Sequential()\nm.fit(x, y)\n")


# ---- TF002 device pin ----------------------------------------------------------------------------------
def test_tf002_training_under_single_gpu():
    src = HEAD + "with tf.device('/gpu:0'):\n    model.fit(x, y, batch_size=B)\n"
    assert "TF002" in ids(src)


def test_tf002_quiet_tf1_towers():
    src = """
import tensorflow.compat.v1 as tf
num_gpus = 2
with tf.device('/cpu:0'):
    opt = tf.train.AdamOptimizer()
    grads = []
    for i in range(num_gpus):
        with tf.device('/gpu:%d' % i):
            grads.append(opt.compute_gradients(loss_fn(i)))
    train_op = opt.apply_gradients(average(grads))
"""
    assert "TF002" not in ids(src)


def test_tf002_quiet_tensor_pinned():
    src = HEAD + "with tf.device('/gpu:0'):\n    table = tf.constant([1.0, 2.0])\n"
    assert "TF002" not in ids(src)


# ---- TF003 visible devices -----------------------------------------------------------------------------
@pytest.mark.parametrize("stmt", [
    "os.environ['CUDA_VISIBLE_DEVICES'] = '0'",
    "os.environ.setdefault('CUDA_VISIBLE_DEVICES', '2')",
    "os.environ.update(CUDA_VISIBLE_DEVICES='1')",
    "tf.config.set_visible_devices(gpus[0], 'GPU')",
    "tf.config.experimental.set_visible_devices([gpus[1]], 'GPU')",
    "tf.config.set_visible_devices(gpus[:1], 'GPU')",
])
def test_tf003_narrowed(stmt):
    src = f"import os\nimport tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')\n{stmt}\n"
    assert "TF003" in ids(src + "strategy = tf.distribute.MirroredStrategy()\n")
    assert "TF003" not in ids(src)  # a one-GPU script choosing its GPU: no multi-device intent


@pytest.mark.parametrize("stmt", [
    "os.environ['CUDA_VISIBLE_DEVICES'] = '-1'",
    "os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'",
    "# os.environ['CUDA_VISIBLE_DEVICES'] = '0'",
    "os.environ['CUDA_VISIBLE_DEVICES'] = str(args.gpu)",
    "tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU')",
    "tf.config.set_visible_devices([], 'GPU')",
    "tf.config.set_visible_devices(gpus[0], 'CPU')",
])
def test_tf003_quiet(stmt):
    assert "TF003" not in ids(f"import os\nimport tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')\n{stmt}\n")


# ---- TF004 dataset not distributed, TF005 direct step, TF006 loss, TF011 tf.function -------------------
LOOP = HEAD + """
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD()
    loss_obj = tf.keras.losses.MeanSquaredError({reduction})
ds = tf.data.Dataset.from_tensor_slices(data).batch(B).prefetch(2)
{dist}
def step(x):
    with tf.GradientTape() as tape:
        loss = {loss}
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
{deco}
def dstep(x):
    return strategy.run(step, args=(x,))
for x in {it}:
    {call}
"""
GOOD = dict(reduction="reduction=tf.keras.losses.Reduction.NONE",
            dist="dist_ds = strategy.experimental_distribute_dataset(ds)",
            loss="tf.nn.compute_average_loss(loss_obj(x, model(x)), global_batch_size=B)",
            deco="@tf.function", it="dist_ds", call="dstep(x)")


def loop_ids(**changes):
    return ids(LOOP.format(**{**GOOD, **changes}))


def test_custom_loop_done_right_is_clean():
    assert loop_ids() == set()


def test_tf004_undistributed_dataset():
    assert "TF004" in loop_ids(it="ds")


def test_tf004_quiet_distribute_datasets_from_function():
    assert "TF004" not in loop_ids(dist="dist_ds = strategy.distribute_datasets_from_function(lambda ctx: ds)")


def test_tf005_step_called_directly():
    assert "TF005" in loop_ids(call="step(x)")


def test_tf006_default_reduction():
    assert "TF006" in loop_ids(reduction="")


def test_tf011_not_tf_function():
    assert "TF011" in loop_ids(deco="")


def test_keras_fit_needs_no_custom_loop_machinery():
    src = HEAD + """
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer='adam', loss=tf.keras.losses.MeanSquaredError())
ds = tf.data.Dataset.from_tensor_slices(data).map(f, num_parallel_calls=tf.data.AUTOTUNE).batch(B).prefetch(2)
model.fit(ds, epochs=3)
"""
    assert ids(src) == set()


# ---- TF007 batch, TF008 prefetch, TF009 map ------------------------------------------------------------
def test_tf007_fixed_batch():
    src = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nBATCH = 64\n" \
          "ds = tf.data.Dataset.range(10).batch(BATCH).prefetch(1)\nmodel.fit(ds)\n"
    assert "TF007" in ids(src)


def test_tf007_quiet_when_scaled():
    assert "TF007" not in ids(HEAD + "ds = tf.data.Dataset.range(10).batch(B).prefetch(1)\nmodel.fit(ds)\n")


def test_tf008_tf009_pipeline():
    found = ids("import tensorflow as tf\nds = tf.data.TFRecordDataset(f).map(parse).batch(32)\nmodel.fit(ds)\n")
    assert {"TF008", "TF009"} <= found


def test_tf009_quiet_on_non_tfdata_map():
    assert "TF009" not in ids("import pandas as pd\ndf = pd.read_csv('x')\ndf['a'] = df['a'].map(str)\n")


# ---- TF010 accumulation, TF012 multi-worker ------------------------------------------------------------
def test_tf010_applies_every_micro_step():
    src = """
import tensorflow as tf
for batch in ds:
    for i in range(accum_steps):
        with tf.GradientTape() as tape:
            loss = model(batch)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
"""
    assert "TF010" in ids(src)


def test_tf010_quiet_when_guarded():
    src = """
import tensorflow as tf
for i, batch in enumerate(ds):
    with tf.GradientTape() as tape:
        loss = model(batch)
    accum = [a + g for a, g in zip(accum, tape.gradient(loss, model.trainable_variables))]
    if (i + 1) % accum_steps == 0:
        opt.apply_gradients(zip(accum, model.trainable_variables))
"""
    assert "TF010" not in ids(src)


def test_tf012_mwms_without_cluster_only_when_selected():
    from allgpu.lint import check_source
    src = "import tensorflow as tf\ns = tf.distribute.MultiWorkerMirroredStrategy()\n"
    assert "TF012" not in {f.rule_id for f in check_source(src, "t.py")}  # off by default (DEFAULT_OFF)
    assert [f.rule_id for f in check_source(src, "t.py", select="TF012")] == ["TF012"]
    assert "TF012" in {f.rule_id for f in check_source(src, "t.py", select="TF")}


@pytest.mark.parametrize("extra", [
    "os.environ['TF_CONFIG'] = cfg",
    "r = tf.distribute.cluster_resolver.SlurmClusterResolver()",
])
def test_tf012_quiet_with_cluster(extra):
    from allgpu.lint import check_source
    src = f"import os\nimport tensorflow as tf\n{extra}\ns = tf.distribute.MultiWorkerMirroredStrategy()\n"
    assert check_source(src, "t.py", select="TF012") == []


def test_tf001_follows_function_passed_to_absl_app_run():
    src = """
import tensorflow as tf
from absl import app
def main(argv):
    strategy = tf.distribute.MirroredStrategy()
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.fit(x, y)
app.run(main)
"""
    assert "TF001" in ids(src)


def test_tf008_quiet_on_tf_data_options_only():
    src = "import tensorflow as tf\nopts = tf.data.Options()\nmodel.fit(x, y)\n"
    assert "TF008" not in ids(src)


# ---- real-world corpus families (issue 11) -------------------------------------------------------------
def test_tf007_quiet_on_constant_named_global_and_in_input_fn():
    src = HEAD.replace("B = 64 * strategy.num_replicas_in_sync\n", "") + """
GLOBAL_BATCH_SIZE = 64
ds = tf.data.Dataset.range(10).batch(GLOBAL_BATCH_SIZE).prefetch(1)
def dataset_fn(input_context):
    return tf.data.Dataset.range(10).batch(16).prefetch(1)
dist = strategy.distribute_datasets_from_function(dataset_fn)
model.fit(ds)
"""
    assert "TF007" not in ids(src)
    assert "TF007" in ids(src.replace("batch(GLOBAL_BATCH_SIZE)", "batch(64)"))


def test_tf007_quiet_on_fit_before_any_strategy():
    src = ("import tensorflow as tf\nmodel = build()\nmodel.fit(x, y, batch_size=8)\n"
           "strategy = tf.distribute.MirroredStrategy()\nwith strategy.scope():\n    m2 = build()\n"
           "m2.fit(x, y, batch_size=8)\n")
    from allgpu.lint import check_source
    assert [f.line for f in check_source(src, "t.py", select=ALL_RULES) if f.rule_id == "TF007"] == [7]


def test_tf011_lambda_run_eagerly():
    assert "TF011" in ids(HEAD + "for x in dist:\n    out = strategy.run(lambda v: v * 2, args=(x,))\n")
    assert "TF011" not in ids(HEAD + "@tf.function\ndef f(x):\n    return strategy.run(lambda v: v, args=(x,))\n")


def test_tf008_only_training_pipelines_and_not_distributed_ones():
    train = "ds = tf.data.Dataset.range(8).batch(B)\n"
    assert "TF008" in ids(HEAD + train + "model.fit(ds)\n")
    assert "TF008" not in ids(HEAD + train + "model.evaluate(ds)\n")
    assert "TF008" not in ids(HEAD + train + "dist = strategy.experimental_distribute_dataset(ds)\n"
                              "for x in dist:\n    strategy.run(step, args=(x,))\n")
    assert "TF008" not in ids(HEAD + train + "ds = ds.prefetch(2)\nmodel.fit(ds)\n")


def test_tf009_follows_tuple_unpacking_and_subscripts():
    src = ("import tensorflow as tf\nimport tensorflow_datasets as tfds\n"
           "datasets, info = tfds.load('mnist', with_info=True)\ntr, te = datasets['train'], datasets['test']\n"
           "ds = tr.map(f).batch(8).prefetch(1)\nmodel.fit(ds)\n")
    assert "TF009" in ids(src)


def test_tf001_and_tf005_quiet_on_single_device_baseline_before_strategy():
    src = """
import tensorflow as tf
class Trainer:
    def __init__(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.opt = tf.keras.optimizers.Adam()
    def step(self, x):
        with tf.GradientTape() as t:
            loss = self.model(x)
        self.opt.apply_gradients(zip(t.gradient(loss, self.model.trainable_variables), self.model.trainable_variables))
    def train(self, ds):
        for x in ds:
            self.step(x)
baseline = Trainer()
baseline.train(ds)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    dist = Trainer()
"""
    assert not {"TF001", "TF005"} & ids(src)
    assert "TF001" in ids(src + "baseline.train(ds)\n")


def test_mirrored_over_one_listed_device_is_single_device():
    src = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy(devices=['/GPU:0'])\n"
           "ds = tf.data.Dataset.range(8).batch(32).prefetch(1)\nmodel.fit(ds)\n")
    assert "TF007" not in ids(src)
    assert "TF007" in ids(src.replace("['/GPU:0']", "['/GPU:0', '/GPU:1']"))


def test_notebook_builder_in_one_cell_called_under_scope_in_another_and_baseline_cells():
    import json
    from allgpu.lint import check_source
    cells = ["import tensorflow as tf\ndef build():\n    return tf.keras.Sequential([tf.keras.layers.Dense(1)])",
             "base = build()\nbase.compile('adam', 'mse')\nbase.fit(x, y)",  # runs before any strategy: baseline
             "strategy = tf.distribute.MirroredStrategy()",
             "with strategy.scope():\n    model = build()\n    model.compile('adam', 'mse')",
             "model.fit(x, y)"]
    nb = json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells]})
    assert [f.rule_id for f in check_source(nb, "n.ipynb", select=ALL_RULES) if f.rule_id == "TF001"] == []
    late = json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells + ["base.fit(x, y)"]]})
    [f] = [f for f in check_source(late, "n.ipynb", select=ALL_RULES) if f.rule_id == "TF001"]
    assert (f.cell, f.line) == (1, 3) and "called at cell 2, line 1" in f.message


def test_tf011_quiet_in_tf1_graph_mode():
    src = HEAD + "def step(x):\n    return x\nloss = strategy.run(step, args=(x,))\nwith tf.compat.v1.Session() as s:\n    s.run(loss)\n"
    assert "TF011" not in ids(src)
    assert "TF011" in ids(src.replace("with tf.compat.v1.Session() as s:\n    s.run(loss)\n", ""))


def test_tf007_constant_batch_even_when_the_replica_count_is_printed():
    src = (HEAD + "print(strategy.num_replicas_in_sync)\nds = tf.data.Dataset.range(8).batch(64).prefetch(1)\n"
           "pds = tf.data.Dataset.range(8).padded_batch(4).prefetch(1)\nmodel.fit(ds)\nmodel.fit(pds)\n")
    from allgpu.lint import check_source
    assert [f.line for f in check_source(src, "t.py", select=ALL_RULES) if f.rule_id == "TF007"] == [5, 6]
    scaled = HEAD + "BATCH = 64\nBATCH *= strategy.num_replicas_in_sync\nds = tf.data.Dataset.range(8).batch(BATCH)\n"
    assert "TF007" not in ids(scaled + "model.fit(ds.prefetch(1))\n")


def test_tf007_fit_batch_size_ignored_for_datasets():
    assert "TF007" in ids(HEAD.replace("B = 64 * strategy.num_replicas_in_sync\n", "") + "model.fit(x_train, y_train, batch_size=32)\n")
    assert "TF007" not in ids(HEAD + "train_dataset = loader.get()\nmodel.fit(train_dataset, batch_size=32)\n")


def test_flagship_rules_on_by_default_and_tf012_only_when_selected():
    from allgpu.lint import check_source
    from allgpu.lint.catalog import DEFAULT_OFF
    assert DEFAULT_OFF <= {"TF012"}
    src = HEAD.replace("B = 64 * strategy.num_replicas_in_sync\n", "") + \
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\nmodel.compile('adam', 'mse')\nmodel.fit(x, y, batch_size=32)\n"
    assert {"TF001", "TF007"} <= {f.rule_id for f in check_source(src, "t.py")}
    mw = "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
    assert "TF012" not in {f.rule_id for f in check_source(mw, "t.py")}
    assert "TF012" in {f.rule_id for f in check_source(mw, "t.py", select="TF012")}


# ---- TF001 follows the binding, not the name (issue 21) -------------------------------------------------------
def test_tf001_model_for_evaluation_then_a_new_one_trained_in_scope():
    src = HEAD + """
model = tf.keras.models.load_model('baseline.h5')
print(model.evaluate(x_test, y_test))
model.save('export')
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile('adam', 'mse')
model.fit(ds)
"""
    assert "TF001" not in ids(src)


def test_tf001_trained_through_strategy_run_after_the_binding():
    src = HEAD + """
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
with strategy.scope():
    opt = tf.keras.optimizers.Adam()
@tf.function
def step(x):
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(model(x))
    opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
for x in dist_ds:
    strategy.run(step, args=(x,))
"""
    from allgpu.lint import check_source
    assert [f.line for f in check_source(src, "t.py") if f.rule_id == "TF001"] == [5]


def test_tf001_rebound_before_training_and_helper_that_returns_it():
    rebound = HEAD + """
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.summary()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile('adam', 'mse')
model.fit(ds)
"""
    assert "TF001" not in ids(rebound)
    helper = HEAD + """
def build():
    m = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    m.compile('adam', 'mse')
    return m
net = build()
net.fit(ds)
"""
    assert "TF001" in ids(helper)


# ---- TF008 through iterators and Estimator input functions (issue 21) -------------------------------------------
def test_tf008_iterator_drawn_in_a_training_script():
    eager = """
import tensorflow as tf
import tensorflow.contrib.eager as tfe
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(128)
it = tfe.Iterator(dataset)
opt = tf.train.GradientDescentOptimizer(0.1)
for step in range(100):
    d = it.next()
    opt.apply_gradients(grad(d))
"""
    assert "TF008" in ids(eager)
    assert "TF008" not in ids(eager.replace(".batch(128)", ".batch(128).prefetch(1)"))
    graph = """
import tensorflow as tf
dataset = tf.contrib.data.Dataset.from_tensor_slices((x, y)).batch(128)
X, Y = dataset.make_initializable_iterator().get_next()
train_op = tf.train.AdamOptimizer().minimize(loss(X, Y))
with tf.Session() as sess:
    for step in range(100):
        sess.run(train_op)
"""
    assert "TF008" in ids(graph)
    assert "TF008" not in ids(graph.replace("dataset", "test_dataset"))  # an evaluation pipeline
    assert "TF008" not in ids(graph.replace("train_op = tf.train.AdamOptimizer().minimize(loss(X, Y))", "print(X)"))


def test_tf008_estimator_input_fn():
    src = """
import tensorflow as tf
def input_fn(files, batch_size=200):
    dataset = tf.data.TextLineDataset(files).map(parse, num_parallel_calls=4)
    return dataset.batch(batch_size).make_one_shot_iterator().get_next()
"""
    assert "TF008" in ids(src)
    assert "TF008" not in ids(src.replace(".batch(batch_size)", ".batch(batch_size).prefetch(1)"))


def test_tf002_keras_training_under_a_cpu_pin_and_tf001_library_models():
    cpu = """
import tensorflow as tf
with tf.device("/cpu:0"):
    model = DenseNet121(num_classes=10)
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    model.fit(train, epochs=3)
"""
    assert "TF002" in ids(cpu)
    # variables on the CPU, the towers on the GPUs (TF1), or a CPU pin that only prepares data: not reported
    assert "TF002" not in ids(cpu.replace("model.fit(train, epochs=3)", "x = tf.constant(1)"))
    lib = HEAD + "import keras_cv\nmodel = keras_cv.models.RetinaNet(classes=20)\nmodel.compile('adam')\nmodel.fit(ds)\n"
    assert "TF001" in ids(lib)
    assert "TF001" not in ids(lib.replace("model = keras_cv", "with strategy.scope():\n    model = keras_cv"))


def test_tf008_pipeline_from_a_library_loader_seen_by_autotune():
    src = """
import tensorflow as tf
train_ds, info = load_pascal_voc(split="train", batch_size=8)
train_ds = train_ds.map(unpack, num_parallel_calls=tf.data.AUTOTUNE)
model.fit(train_ds, epochs=3)
"""
    assert "TF008" in ids(src)
    assert "TF008" not in ids(src.replace("model.fit(train_ds", "train_ds = train_ds.prefetch(2)\nmodel.fit(train_ds"))


def test_tf008_pipeline_returned_in_a_tuple_and_unpacked():
    src = """
import tensorflow as tf
def load():
    train = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=4)
    val = tf.data.TFRecordDataset(vfiles).map(parse, num_parallel_calls=4)
    return train.batch(64), val.batch(64).prefetch(1)
train_ds, val_ds = load()
model.fit(train_ds, validation_data=val_ds)
"""
    found = [f.line for f in check_lines(src) if f.rule_id == "TF008"]
    assert found == [4]
    assert "TF008" not in ids(src.replace("train.batch(64),", "train.batch(64).prefetch(1),"))


def check_lines(src):
    from allgpu.lint import check_source
    return check_source(src, "t.py")


def test_tf007_evaluation_only_pipeline_not_reported():
    src = HEAD.replace("B = 64 * strategy.num_replicas_in_sync\n", "") + """
train_ds = tf.data.Dataset.from_tensor_slices(xy).batch(64 * strategy.num_replicas_in_sync)
test_ds = tf.data.Dataset.from_tensor_slices(xy_test).batch(32)
test_ds = test_ds.prefetch(2)
model.fit(train_ds, validation_data=test_ds)
model.evaluate(test_ds)
"""
    assert "TF007" not in ids(src)
    assert "TF007" in ids(src.replace("model.evaluate(test_ds)", "model.fit(test_ds)"))


def test_tf001_tf007_later_snippet_that_no_longer_uses_the_strategy():
    src = HEAD + """
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile('adam', 'mse')
model.fit(x, y, batch_size=B)
# single-GPU comparison
single = tf.keras.Sequential([tf.keras.layers.Dense(1)])
single.compile('adam', 'mse')
single.fit(x, y, batch_size=64)
"""
    assert not {"TF001", "TF007"} & ids(src)
    later_use = src + "print(strategy.num_replicas_in_sync)\n"
    assert {"TF001", "TF007"} <= ids(later_use)


def test_tf011_keras_train_step_override_runs_in_a_tf_function():
    src = HEAD + """
class Model(tf.keras.Model):
    def train_step(self, data):
        return strategy.run(self._step, args=(data,))
    def _step(self, data):
        return data
"""
    assert "TF011" not in ids(src)
    assert "TF011" in ids(src + "def loop(b):\n    return strategy.run(step, args=(b,))\ndef step(b):\n    return b\n")
