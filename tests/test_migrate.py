"""`allgpu migrate` on small snippets: what it rewrites, what it reports (with the line and why), the file it writes."""

import importlib.util
import os
import textwrap

import pytest

from allgpu.cli.main import main
from allgpu.errors import MigrateInputError
from allgpu.lint import check_source
from allgpu.migrate import migrate_file, migrate_source
from allgpu.migrate.notes import CHANGED, FIXED, KEPT, NOT_CONVERTED


def _migrate(code: str):
    return migrate_source(textwrap.dedent(code), "s.py")


def _kinds(migration, kind):
    return [(n.line, n.message) for n in migration.notes if n.kind == kind]


def test_strategy_keras_and_imports():
    m = _migrate("""\
        import tensorflow as tf

        strategy = tf.distribute.MirroredStrategy()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(4)])
            model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mse")
        """)
    assert m.result == textwrap.dedent("""\
        import os
        os.environ["KERAS_BACKEND"] = "torch"  # before the first `import keras`: Keras 3 on PyTorch
        import keras
        import allgpu

        strategy = allgpu.MirroredStrategy()
        with strategy.scope():
            model = keras.Sequential([keras.layers.Dense(4)])
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        """)
    assert m.complete and (3, "tf.distribute.MirroredStrategy(...) -> allgpu.MirroredStrategy(...)") in \
        _kinds(m, CHANGED)
    assert migrate_source(m.result).result == m.result  # nothing left to migrate: idempotent


def test_every_strategy_and_cluster_resolver():
    m = _migrate("""\
        import tensorflow as tf
        a = tf.distribute.MultiWorkerMirroredStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
        b = tf.distribute.OneDeviceStrategy(device="/gpu:0")
        c = tf.distribute.experimental.CentralStorageStrategy(parameter_device="/cpu:0")
        d = tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"], cross_device_ops=tf.distribute.NcclAllReduce())
        e = tf.distribute.experimental.ParameterServerStrategy(resolver)
        """)
    lines = m.result.splitlines()
    assert "a = allgpu.MultiWorkerMirroredStrategy(allgpu.cluster_resolver.TFConfigClusterResolver())" in lines
    assert 'b = allgpu.OneDeviceStrategy(device="/gpu:0")' in lines
    assert 'c = allgpu.CentralStorageStrategy(central_device="/cpu:0")' in lines
    assert 'd = allgpu.MirroredStrategy(["/gpu:0", "/gpu:1"])' in lines  # the all-reduce choice dropped, said so
    assert "e = allgpu.ParameterServerStrategy()" in lines
    changed = dict(_kinds(m, CHANGED))
    assert "cross_device_ops" in changed[5] and "parameter_device" in changed[4] and "num_ps" in changed[6]
    assert "import tensorflow" not in m.result and m.complete  # NcclAllReduce() went with the dropped argument


def test_a_strategy_argument_without_equivalent_is_left_and_reported():
    m = _migrate("""\
        import tensorflow as tf
        s = tf.distribute.MirroredStrategy(devices=None, bogus=1)
        """)
    assert "tf.distribute.MirroredStrategy(devices=None, bogus=1)" in m.result
    assert not m.complete and "`bogus=` has no allgpu equivalent" in _kinds(m, NOT_CONVERTED)[0][1]
    assert len(_kinds(m, NOT_CONVERTED)) == 1 and not _kinds(m, CHANGED)  # one note for the call left whole


def test_the_gradient_tape_step_becomes_keras_torch_backend_step():
    m = _migrate("""\
        import tensorflow as tf

        def train_step(x, y):
            with tf.GradientTape() as tape:
                predictions = model(x)
                loss = loss_fn(y, predictions)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        """)
    assert textwrap.dedent("""\
        def train_step(x, y):
            predictions = model(x)
            loss = loss_fn(y, predictions)
            model.zero_grad()
            trainable_weights = [v for v in model.trainable_variables]
            loss.backward()
            grads = [v.value.grad for v in trainable_weights]
            with torch.no_grad():
                optimizer.apply(grads, trainable_weights)
            return loss
        """) in m.result
    assert "import torch\n" in m.result and "tensorflow" not in m.result and m.complete
    assert _kinds(m, CHANGED)[-1][0] == 4 or any(line == 4 for line, _ in _kinds(m, CHANGED))


def test_a_step_over_model_trainable_weights_is_converted():
    # keras-io's "Writing a training loop from scratch in TensorFlow" spells it `model.trainable_weights`; the
    # attribute was mistaken for a variable named `trainable_weights`, and the step refused as not canonical
    m = migrate_source("import tensorflow as tf\ndef step(x, y):\n    with tf.GradientTape() as tape:\n"
                       "        loss_value = loss_fn(y, model(x))\n"
                       "    grads = tape.gradient(loss_value, model.trainable_weights)\n"
                       "    optimizer.apply_gradients(zip(grads, model.trainable_weights))\n")
    assert "trainable_weights = [v for v in model.trainable_weights]" in m.result and "GradientTape" not in m.result
    assert not _kinds(m, NOT_CONVERTED) and m.complete
    kept = migrate_source("import tensorflow as tf\ntrainable_weights = 1\ndef step(x, y):\n"
                          "    with tf.GradientTape() as tape:\n        loss = loss_fn(y, model(x))\n"
                          "    grads = tape.gradient(loss, model.trainable_weights)\n"
                          "    optimizer.apply_gradients(zip(grads, model.trainable_weights))\n")
    assert "tf.GradientTape()" in kept.result  # a script's own `trainable_weights` name is still not shadowed


def test_a_step_applied_with_keras3_optimizer_apply_is_converted():
    # keras-io's Keras 3 "Writing a training loop from scratch in TensorFlow" applies with `optimizer.apply(grads,
    # model.trainable_weights)`, Keras 3's spelling of apply_gradients(zip(...)); it was refused as not canonical
    m = migrate_source("import tensorflow as tf\ndef step(x, y):\n    with tf.GradientTape() as tape:\n"
                       "        loss = loss_fn(y, model(x))\n"
                       "    grads = tape.gradient(loss, model.trainable_weights)\n"
                       "    d_opt.apply(grads, model.trainable_weights)\n")
    assert "        d_opt.apply(grads, trainable_weights)" in m.result and "GradientTape" not in m.result
    assert m.complete
    other = migrate_source("import tensorflow as tf\ndef step(x, y):\n    with tf.GradientTape() as tape:\n"
                           "        loss = loss_fn(y, model(x))\n"
                           "    grads = tape.gradient(loss, model.trainable_weights)\n"
                           "    d_opt.apply(grads, other.trainable_weights)\n")  # not the variables differentiated
    assert "tf.GradientTape()" in other.result and not other.complete


def test_an_unguarded_print_in_a_distributed_script_is_noted():
    # a migrated keras-io training loop printed every line once per replica, with nothing saying why
    m = migrate_source("import tensorflow as tf\ns = tf.distribute.MirroredStrategy()\nprint('epoch', 1)\n"
                       "if s.is_chief:\n    print('once')\n")
    assert [line for line, message in _kinds(m, KEPT) if message.startswith("print: runs on every replica")] == [3]
    assert m.complete
    alone = migrate_source("import tensorflow as tf\nprint(tf.keras.layers.Dense(1))\n")  # no strategy: no note
    assert not [n for n in _kinds(alone, KEPT) if n[1].startswith("print")]


@pytest.mark.parametrize("variant", [
    "with tf.GradientTape(persistent=True) as tape:\n        loss = model(x)",  # a persistent tape
    "with tf.GradientTape() as tape:\n        tape.watch(x)\n        loss = model(x)",  # tape.watch
])
def test_a_tape_that_is_not_the_canonical_step_is_left_and_reported(variant):
    m = migrate_source("import tensorflow as tf\ndef step(x):\n    " + variant + "\n"
                       "    grads = tape.gradient(loss, model.trainable_variables)\n"
                       "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n")
    assert "tf.GradientTape(" in m.result and "import tensorflow as tf" in m.result
    assert [line for line, message in _kinds(m, NOT_CONVERTED) if "GradientTape" in message] == [3]


def test_tf_device_config_and_raw_ops_are_listed_with_line_and_reason():
    m = _migrate("""\
        import tensorflow as tf
        tf.config.experimental.set_memory_growth(gpu, True)
        with tf.device('/gpu:0'):
            a = tf.random.normal((4, 4))
            b = tf.matmul(a, a)
        """)
    left = _kinds(m, NOT_CONVERTED)
    assert [line for line, _ in left] == [2, 3, 4, 5]
    assert "tf.device" in left[1][1] and "own device" in left[1][1] and "keras.ops or torch" in left[3][1]
    assert m.result.splitlines()[-1].strip() == "b = tf.matmul(a, a)" and not m.complete


def test_tf_data_is_kept_with_its_input_ops():
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        ds = tf.data.Dataset.from_tensor_slices((tf.random.uniform((8, 2), dtype=tf.float32), y)).batch(4)
        dist = strategy.experimental_distribute_dataset(ds.prefetch(tf.data.AUTOTUNE))
        """)
    assert "import tensorflow as tf" in m.result and "strategy.experimental_distribute_dataset(" in m.result
    assert _kinds(m, KEPT)[0][0] == 3 and m.complete  # the tf ops inside tf.data's arguments are its input


def test_model_built_outside_scope_is_mirrored_and_said_so():
    m = _migrate("""\
        import tensorflow as tf
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        strategy = tf.distribute.MirroredStrategy()
        model.compile(loss="mse")
        """)
    assert "strategy = allgpu.MirroredStrategy()\nmodel = strategy.mirror(model)" in m.result
    assert _kinds(m, FIXED)[0][0] == 2 and m.complete


def test_model_outside_scope_with_two_strategies_is_reported_not_guessed():
    m = _migrate("""\
        import tensorflow as tf
        try:
            strategy = tf.distribute.MirroredStrategy()
        except RuntimeError:
            strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        """)
    assert ".mirror(" not in m.result
    assert _kinds(m, NOT_CONVERTED)[0][0] == 6 and "strategy.mirror(model)" in _kinds(m, NOT_CONVERTED)[0][1]


def test_models_built_in_functions_or_in_scope_are_not_touched():
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        def build():
            model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
            return model
        with strategy.scope():
            model = build()
        """)
    assert ".mirror(" not in m.result and m.complete


def test_tf_function_bare_is_removed_with_arguments_reported():
    m = _migrate("""\
        import tensorflow as tf

        @tf.function
        def a(x):
            return x

        @tf.function(jit_compile=True)
        def b(x):
            return x
        """)
    assert "@tf.function\n" not in m.result and "@tf.function(jit_compile=True)" in m.result
    assert _kinds(m, CHANGED)[0][0] == 3 and [line for line, _ in _kinds(m, NOT_CONVERTED)] == [7]


def test_from_imports_and_checkpoint_names():
    m = _migrate("""\
        from tensorflow import keras
        from tensorflow.keras import layers
        import tensorflow as tf
        ckpt = tf.train.Checkpoint(model=m)
        manager = tf.train.CheckpointManager(ckpt, "d", max_to_keep=3)
        ckpt.restore(tf.train.latest_checkpoint("d"))
        """)
    assert "from keras import layers" in m.result and "import keras" in m.result
    assert 'allgpu.checkpoint.CheckpointManager(ckpt, "d", max_to_keep=3)' in m.result
    assert 'ckpt.restore(allgpu.checkpoint.latest_checkpoint("d"))' in m.result and "tensorflow" not in m.result


def test_keras2_names_missing_in_keras3_are_not_converted():
    m = _migrate("""\
        import tensorflow as tf
        opt = tf.keras.optimizers.legacy.Adam()
        """)
    assert "tf.keras.optimizers.legacy.Adam()" in m.result and "legacy" in _kinds(m, NOT_CONVERTED)[0][1]


def test_result_passes_lint_and_compiles():
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,)), tf.keras.layers.Dense(2)])
            optimizer = tf.keras.optimizers.Adam()
        ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.keras.losses.MeanSquaredError()(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        for x, y in ds:
            strategy.run(step, args=(x, y))
        """)
    compile(m.result, "s.py", "exec")
    assert not [f for f in check_source(m.result, "s.py") if f.severity == "error"]
    assert m.complete and not [n for n in m.notes if n.kind == "lint" and n.message.startswith("error")]


def test_a_script_without_tensorflow_is_unchanged():
    m = _migrate("import torch\nx = torch.ones(2)\n")
    assert not m.changed and m.diff() == "" and "nothing to migrate" in m.report()


def test_invalid_python_is_a_typed_error():
    with pytest.raises(MigrateInputError, match="not valid Python"):
        migrate_source("def (:\n", "bad.py")


def test_cli_prints_a_diff_and_writes_only_with_write(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n")
    os.chmod(script, 0o750)
    assert main(["migrate", str(script)]) == 0
    out = capsys.readouterr()
    assert "+strategy = allgpu.MirroredStrategy()" in out.out and "changed" in out.err
    assert "tf.distribute" in script.read_text()  # a diff only
    assert main(["migrate", "--write", str(script)]) == 0
    assert "allgpu.MirroredStrategy()" in script.read_text() and (script.stat().st_mode & 0o777) == 0o750
    assert list(tmp_path.iterdir()) == [script]  # no temporary file left


def test_cli_exit_codes(tmp_path, capsys):
    partial = tmp_path / "p.py"
    partial.write_text("import tensorflow as tf\nwith tf.device('/gpu:0'):\n    x = tf.ones(1)\n")
    assert main(["migrate", str(partial)]) == 1
    assert "p.py:2: not converted: tf.device" in capsys.readouterr().err
    assert main(["migrate", str(tmp_path / "missing.py")]) == 2


def test_an_interrupted_write_leaves_the_original_whole(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    original = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
    script.write_text(original)

    def fail(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        migrate_file(script, write=True)
    assert script.read_text() == original and list(tmp_path.iterdir()) == [script]


def test_keras2_names_are_checked_against_the_installed_keras3():
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed: nothing to check the names against")
    m = _migrate("""\
        import tensorflow as tf
        loss = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.NONE)
        gen = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1 / 255)
        creator = tf.keras.utils.experimental.DatasetCreator(fn)
        """)
    assert 'keras.losses.MeanSquaredError(reduction="none")' in m.result
    assert [line for line, _ in _kinds(m, NOT_CONVERTED)] == [3, 4]
    assert "tf.keras.utils.experimental.DatasetCreator(fn)" in m.result  # left as it is, not a failing keras name


def test_compute_average_loss_by_keyword_only():
    m = _migrate("""\
        import tensorflow as tf
        a = tf.nn.compute_average_loss(per_example, global_batch_size=64)
        b = tf.nn.compute_average_loss(per_example, weights, 64)
        """)
    assert "a = allgpu.compute_average_loss(per_example, global_batch_size=64)" in m.result
    assert "b = tf.nn.compute_average_loss(per_example, weights, 64)" in m.result
    assert [line for line, _ in _kinds(m, NOT_CONVERTED)] == [3] and not any(n[0] == 3 for n in _kinds(m, CHANGED))


def test_a_custom_train_step_is_converted_and_keras2_attributes_reported():
    m = _migrate("""\
        import tensorflow as tf

        class Model(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    y_pred = self(x, training=True)
                    loss = self.compiled_loss(y, y_pred)
                gradients = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
                self.compiled_metrics.update_state(y, y_pred)
                return {m.name: m.result() for m in self.metrics}
        """)
    assert "class Model(keras.Model):" in m.result and "self.zero_grad()" in m.result
    assert "        self.optimizer.apply(gradients, trainable_weights)" in m.result
    assert [line for line, _ in _kinds(m, NOT_CONVERTED)] == [8, 11]


def test_a_constant_batch_is_kept_as_the_global_batch_and_said_so():
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(128)
        model.fit(x, y, batch_size=32, epochs=1)
        """)
    kept = dict(_kinds(m, KEPT))
    assert ".batch(128): 128 stays the global batch" in [v for k, v in _kinds(m, KEPT) if k == 3][-1]
    assert kept[4].startswith("fit(batch_size=32): 32 stays the global batch") and "TF007" in kept[4] and "batch_size=32" in m.result


def test_functions_given_to_map_are_input_code():
    m = _migrate("""\
        import tensorflow as tf
        def scale(image, label):
            return tf.cast(image, tf.float32) / 255, label
        train = mnist_train.map(scale).map(lambda x, y: (tf.image.resize(x, (32, 32)), y)).batch(64)
        model.load_weights(tf.train.latest_checkpoint("ckpt"))
        """)
    assert [line for line, _ in _kinds(m, NOT_CONVERTED)] == [5]  # only latest_checkpoint: no tf.train.Checkpoint
    assert "Keras' weights" in _kinds(m, NOT_CONVERTED)[0][1] and "tf.cast(image, tf.float32)" in m.result


def test_cli_migrates_a_folder(tmp_path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import tensorflow as tf\ns = tf.distribute.MirroredStrategy()\n")
    (tmp_path / "b.py").write_text("import torch\n")
    assert main(["migrate", "--no-diff", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "a.py:2: changed" in err and "b.py: nothing to migrate" in err


def test_model_outside_scope_in_a_main_function_beside_its_strategy_is_mirrored():
    m = _migrate("""\
        import tensorflow as tf

        def main():
            strategy = tf.distribute.MirroredStrategy()
            model = tf.keras.models.load_model("m.keras")
            model.fit(x, y)
        """)
    assert "    model = keras.models.load_model(\"m.keras\")\n    model = strategy.mirror(model)" in m.result
    assert _kinds(m, FIXED)[0][0] == 5 and m.complete


def test_tf2_aliases_of_keras_modules():
    m = _migrate("""\
        import tensorflow as tf
        opt = tf.optimizers.SGD(0.1)
        loss = tf.losses.MeanSquaredError()
        """)
    assert "opt = keras.optimizers.SGD(0.1)" in m.result and "loss = keras.losses.MeanSquaredError()" in m.result


def test_lint_errors_left_in_the_result_are_reported():
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        for batch in ds:
            strategy.run(step, args=(batch,))
        """)
    assert not m.complete and "allgpu lint finds 1 error(s)" in m.report()


def test_comments_above_a_removed_import_stay():
    m = _migrate("""\
        import sys
        # the framework
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        """)
    assert "# the framework\n" in m.result and "import tensorflow" not in m.result


@pytest.mark.parametrize("imports", [
    "from tensorflow import keras",
    "from tensorflow.keras import layers",
    "import tensorflow.keras as K",
    "from keras import layers",
    "import tensorflow as tf\nimport keras",
])
def test_every_form_that_imports_keras_gets_the_torch_backend_first(imports):
    m = _migrate(f'"""doc"""\n{imports}\nx = 1\n')
    lines = m.result.splitlines()
    backend = lines.index('os.environ["KERAS_BACKEND"] = "torch"  # before the first `import keras`: Keras 3 on PyTorch')
    first_keras = next(i for i, line in enumerate(lines) if "keras" in line.split("#")[0] and "environ" not in line)
    assert lines[0] == '"""doc"""' and lines[backend - 1] == "import os" and backend < first_keras
    assert any("KERAS_BACKEND" in msg for _, msg in _kinds(m, CHANGED))
    assert migrate_source(m.result).result == m.result  # set once


def test_a_script_choosing_its_keras_backend_is_left_to_it():
    source = 'import os\nos.environ["KERAS_BACKEND"] = "jax"\nimport keras\n'
    assert not migrate_source(source).changed


@pytest.mark.parametrize("choice", ['os.environ["KERAS_BACKEND"] = "tensorflow"',
                                    "os.environ.setdefault('KERAS_BACKEND', 'jax')"])
def test_a_distributing_script_choosing_another_keras_backend_gets_torch(choice):
    """Keras' own guide to multi-GPU training with TensorFlow opens with KERAS_BACKEND = "tensorflow": left as it
    was, the migrated script stopped at its first model (allgpu distributes Keras on PyTorch only), while migrate
    said everything had been converted."""
    m = _migrate(f"""\
        import os
        {choice}
        import tensorflow as tf
        import keras
        strategy = tf.distribute.MirroredStrategy()
        """)
    assert ("KERAS_BACKEND\"] = \"torch\"" in m.result or "'KERAS_BACKEND', 'torch'" in m.result) and m.complete
    assert [line for line, msg in _kinds(m, CHANGED) if "KERAS_BACKEND" in msg] == [2]
    assert m.result.count("KERAS_BACKEND") == 1  # not set a second time
    computed = _migrate("""\
        import os
        os.environ["KERAS_BACKEND"] = backend_name
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        """)
    assert [line for line, msg in _kinds(computed, NOT_CONVERTED) if "KERAS_BACKEND" in msg] == [2]


def test_reset_states_renamed_on_metrics_and_rnn_layers_reported_elsewhere():
    m = _migrate("""\
        import tensorflow as tf
        from tensorflow.keras.metrics import Mean
        loss = tf.keras.metrics.Mean()
        acc = Mean()
        lstm = tf.keras.layers.LSTM(4, stateful=True)
        model = tf.keras.Sequential([lstm])
        loss.reset_states()
        acc.reset_states(); lstm.reset_states()
        for metric in model.metrics:
            metric.reset_states()
        model.reset_states()
        other.reset_states()
        """)
    assert "loss.reset_state()" in m.result and "acc.reset_state(); lstm.reset_state()" in m.result
    assert "metric.reset_state()" in m.result
    assert "model.reset_states()" in m.result and "other.reset_states()" in m.result  # left, and said why
    left = dict(_kinds(m, NOT_CONVERTED))
    assert "model.layers" in left[11] and "cannot tell" in left[12] and not m.complete
    assert any(line == 7 and "reset_state()" in msg for line, msg in _kinds(m, CHANGED))


def test_reset_states_in_a_script_without_keras_is_none_of_keras2s():
    assert not migrate_source("import torch\nrnn.reset_states()\n").notes


def test_version_and_regularization_loss_get_their_own_answer():
    m = _migrate("""\
        import tensorflow as tf
        print(tf.__version__)
        reg = tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        """)
    left = _kinds(m, NOT_CONVERTED)
    assert all("raw TensorFlow op" not in msg for _, msg in left)
    assert any(line == 2 and "torch.__version__" in msg for line, msg in left)
    # TensorFlow's value (divided by the replica count, so a SUM reduce counts it once), allgpu's gradient
    assert "reg = allgpu.scale_regularization_loss(sum(model.losses))" in m.result


def test_tensorflow_seed_becomes_keras_seed_which_also_seeds_the_torch_weights():
    # tf.random.set_seed drew a TF Keras model's initial weights too; after migration they are PyTorch's.
    m = _migrate("""\
        import tensorflow as tf
        tf.random.set_seed(0)
        """)
    assert "keras.utils.set_random_seed(0)" in m.result and not _kinds(m, NOT_CONVERTED)


def test_file_io_and_counter_variables_are_not_called_ops():
    # TensorFlow's multi-worker custom-loop tutorial: tf.io.gfile for the non-chief's temporary folder, tf.Variable
    # epoch and step counters saved in the checkpoint. Both work as they are; the notes said "rewrite with torch".
    m = _migrate("""\
        import tensorflow as tf
        tf.io.gfile.makedirs(temp_dir)
        epoch = tf.Variable(initial_value=0, name='epoch')
        """)
    left = dict(_kinds(m, NOT_CONVERTED))
    assert "os.makedirs" in left[2] and "works unchanged" in left[2] and "raw TensorFlow op" not in left[2]
    assert "keras.Variable" in left[3] and "Checkpoint" in left[3] and "raw TensorFlow op" not in left[3]


def test_note_lines_name_their_file_and_point_at_the_written_one(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        with tf.device("/gpu:0"):
            x = tf.random.normal((2, 2))
        ds = tf.data.Dataset.from_tensor_slices(x).batch(8)
        for batch in ds:
            strategy.run(step, args=(batch,))
        """))
    assert main(["migrate", "--no-diff", str(script)]) == 1
    err = capsys.readouterr().err
    assert f"{script}:3: not converted: tf.device" in err  # the original, as on disk and on the diff's - side
    assert f"{script} (migrated):" in err and f"{script}:7: lint" not in err  # lint reads the result
    assert main(["migrate", "--no-diff", "--write", str(script)]) == 1
    err, written = capsys.readouterr().err, script.read_text().splitlines()
    for kind, needle in (("not converted: tf.device", "tf.device"), ("not converted: tf.random", "tf.random"),
                         ("lint: error TF004", "for batch in ds")):
        line = int(next(e for e in err.splitlines() if kind in e).split(":")[1])
        assert needle in written[line - 1], (kind, line)
    assert "(migrated)" not in err


def test_replica_context_names_and_out_of_range_error():
    m = _migrate("""\
        import tensorflow as tf

        def contrastive(h):
            negatives = tf.distribute.get_replica_context().all_gather(h, axis=0)
            return negatives

        strategy = tf.distribute.get_strategy()
        it = iter(dataset)
        try:
            batch = it.get_next()
        except tf.errors.OutOfRangeError:
            pass
        """)
    lines = m.result.splitlines()
    assert "    negatives = allgpu.get_replica_context().all_gather(h, axis=0)" in lines
    assert "strategy = allgpu.get_strategy()" in lines
    assert "except allgpu.errors.OutOfRangeError:" in lines
    assert not _kinds(m, NOT_CONVERTED)
