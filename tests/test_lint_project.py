"""Helpers in other modules of the checked project are followed (one level), never reported at their lines."""

import textwrap

from allgpu.lint import RULES, check_path

ALL = list(RULES)  # TF001 is off by default (held-out precision); these tests check its logic

HELPERS = """
import tensorflow as tf

def build_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
    return model
"""


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def rules(path):
    return [(f.rule_id, f.line) for f in check_path(path, select=ALL)]


def test_model_built_by_helper_module_outside_scope_reported_at_the_call(tmp_path):
    write(tmp_path / "helpers.py", HELPERS)
    main = write(tmp_path / "train.py", """
        import tensorflow as tf
        from helpers import build_model
        strategy = tf.distribute.MirroredStrategy()
        model = build_model()
        model.fit(ds)
    """)
    assert ("TF001", 5) in rules(main)
    [f] = [f for f in check_path(main, select=ALL) if f.rule_id == "TF001"]
    assert "build_model()" in f.message and "[helpers.py]" in f.message and f.path == str(main)


def test_helper_module_called_in_scope_is_quiet_and_helper_lines_never_reported(tmp_path):
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "helpers.py", HELPERS)
    main = write(tmp_path / "pkg" / "train.py", """
        import tensorflow as tf
        from . import helpers
        strategy = tf.distribute.MirroredStrategy()
        with strategy.scope():
            model = helpers.build_model()
        model.fit(ds)
    """)
    assert [r for r in rules(main) if r[0] == "TF001"] == []


def test_check_source_without_path_does_not_look_for_files(tmp_path, monkeypatch):
    from allgpu.lint import check_source
    write(tmp_path / "helpers.py", HELPERS)
    monkeypatch.chdir(tmp_path)
    src = ("import tensorflow as tf\nfrom helpers import build_model\nstrategy = tf.distribute.MirroredStrategy()\n"
           "model = build_model()\nmodel.fit(ds)\n")
    assert [f for f in check_source(src, "train.py", select=ALL) if f.rule_id == "TF001"] == []


def test_batch_fixed_in_a_helper_module_reported_at_the_call(tmp_path):
    write(tmp_path / "data.py", """
        import tensorflow as tf
        def make_dataset(batch_size):
            ds = tf.data.Dataset.from_tensor_slices(x)
            return ds.batch(batch_size).prefetch(2)
    """)
    main = write(tmp_path / "train.py", """
        import tensorflow as tf
        import data
        strategy = tf.distribute.MirroredStrategy()
        with strategy.scope():
            model = build()
        model.fit(data.make_dataset(64))
    """)
    assert ("TF007", 7) in rules(main)
    scaled = main.read_text().replace("make_dataset(64)", "make_dataset(64 * strategy.num_replicas_in_sync)")
    main.write_text(scaled)
    assert [r for r in rules(main) if r[0] == "TF007"] == []
