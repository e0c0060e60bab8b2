"""Issue 21, TF007 and TF001 through the settings objects notebooks and scripts keep (written cases,
`tests/lint_cases/tf_settings/`): a Kaggle-style ``class CFG: batch_size = 16`` read as ``CFG.batch_size``, a
settings dict literal read as ``config["batch_size"]``, and a metric made outside the scope and written into
``compile(metrics=[auc])`` by name. ``p*`` files hold the pitfall at the listed line; ``n*`` files must stay clean
(the setting rescaled by the replica count, a metric made in the scope or used only to evaluate, an instance's
attribute set from the command line, a constant the author names the global batch). ``p7`` is the shape of the
tuning label a0900: ``global_batch_size = per_worker_batch_size``, a per-worker constant taken as the global batch;
``p8``/``n8`` that of a0903: ``strategy.run`` drawing ``next()`` from ``builder.load(batch_size=...).map(fn)`` through
two callers, and the same with the pipelines distributed (an evaluation dict rebuilt by a comprehension)."""

import pathlib

import pytest

from allgpu.lint import check_path, check_source

CASES = pathlib.Path(__file__).parent / "lint_cases" / "tf_settings"

# file -> {(rule, line or "cell N:line")}
EXPECTED = {
    "p1_cfg_class.py": {("TF007", 14)},
    "p2_dict_config.py": {("TF007", 11)},
    "p3_metric_named.py": {("TF001", 5)},
    "p4_cfg_notebook.ipynb": {("TF007", "cell 4:2")},
    "p5_image_dir_loader.py": {("TF007", 5)},
    "p6_batch_keyword.py": {("TF007", 7)},
    "p7_global_alias.py": {("TF007", 14)},
    "p8_loader_map_run.py": {("TF004", 32)},
}


def _findings(name: str) -> set:
    found = check_source((CASES / name).read_text(), name, select=["TF001", "TF004", "TF007"])
    if name.endswith(".ipynb"):  # ``nb.ipynb:cell 4:2:12`` -> ``cell 4:2``
        return {(f.rule_id, ":".join(f.location().split(":")[1:3])) for f in found}
    return {(f.rule_id, f.line) for f in found}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pitfall_reported_at_its_line(name):
    assert _findings(name) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(p.name for p in CASES.glob("n*.py")))
def test_no_pitfall_not_reported(name):
    assert _findings(name) == set()


def test_cfg_class_reassigned_elsewhere_is_not_a_constant():
    """``CFG.batch_size = 64`` anywhere in the file: the class body's 32 is not the batch training uses."""
    src = (CASES / "p1_cfg_class.py").read_text().replace(
        "strategy = tf.distribute.MirroredStrategy()\n",
        "strategy = tf.distribute.MirroredStrategy()\nCFG.batch_size = 8 * strategy.num_replicas_in_sync\n")
    assert [f for f in check_source(src, "t.py", select=["TF007"])] == []


def test_batch_keyword_named_as_the_batch():
    """``ds.batch(batch_size=64)`` is reported by the .batch() rule, not as a library loader."""
    [f] = check_source((CASES / "p6_batch_keyword.py").read_text(), "t.py", select=["TF007"])
    assert "batch size 64 is fixed" in f.message and "loader" not in f.message


TRAIN = """import tensorflow as tf
{imp}

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(tf.zeros([64, 8]), tf.zeros([64]), batch_size={batch}, epochs=2)
"""


@pytest.mark.parametrize("imp,batch,config,reported", [
    ("from config import BATCH_SIZE", "BATCH_SIZE", "BATCH_SIZE = 64\n", True),
    ("import config", "config.BATCH_SIZE", "BATCH_SIZE = 64\n", True),
    ("import config", "config.BATCH_SIZE * strategy.num_replicas_in_sync", "BATCH_SIZE = 64\n", False),
    ("from config import BATCH_SIZE", "BATCH_SIZE", "import os\nBATCH_SIZE = int(os.environ['BS'])\n", False),
])
def test_batch_constant_from_a_project_module(tmp_path, imp, batch, config, reported):
    """A batch constant kept in the project's ``config.py``: the file beside the script is read."""
    (tmp_path / "config.py").write_text(config)
    (tmp_path / "train.py").write_text(TRAIN.format(imp=imp, batch=batch))
    found = [f for f in check_path(tmp_path / "train.py", select=["TF007"]) if f.rule_id == "TF007"]
    assert [f.line for f in found] == ([8] if reported else [])


ABSL_MAIN = """import tensorflow as tf
from absl import app, flags
{imp}

FLAGS = flags.FLAGS


def {fn}(_):
    strategy = tf.distribute.MirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices((tf.zeros([64, 8]), tf.zeros([64])))
    ds = ds.batch(FLAGS.batch_size).prefetch(tf.data.AUTOTUNE)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
    model.fit(ds, epochs=1)


app.run({fn})
"""


@pytest.mark.parametrize("fn,imp,reported", [
    ("main", "from utils import flags_def  # noqa: F401", True),   # absl's main(_): not an input function
    ("main", "", False),                                           # the flag's default is nowhere in the project
    ("dataset_fn", "from utils import flags_def  # noqa: F401", False),  # a ``def fn(_)`` input function
])
def test_absl_flag_defined_in_a_project_module(tmp_path, fn, imp, reported):
    """``flags.DEFINE_integer("batch_size", 128, ...)`` in ``utils/flags_def.py``, read as ``FLAGS.batch_size`` in
    absl's ``def main(_)`` (once taken for an input function's context argument and skipped)."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "flags_def.py").write_text(
        "from absl import flags\n\nflags.DEFINE_integer('batch_size', 128, 'global batch')\n")
    (tmp_path / "train.py").write_text(ABSL_MAIN.format(imp=imp, fn=fn))
    found = [f for f in check_path(tmp_path / "train.py", select=["TF007"]) if f.rule_id == "TF007"]
    assert [f.line for f in found] == ([11] if reported else [])
