"""A TensorFlow notebook through `allgpu migrate --write`, then run in a real Jupyter kernel (nbclient, as
`jupyter execute` runs it): the strategy of one cell mirrors the model another cell built outside its scope, the
shell and magic lines still run, and training gives the numbers of the same code written for allgpu by hand (run with python)."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from allgpu.cli.main import main
from tests.harness import run_python

pytestmark = pytest.mark.timeout(240)

SETUP = """\
!echo shell line ran
%config InlineBackend.figure_format = 'png'
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits"""
STRATEGY = "strategy = tf.distribute.MirroredStrategy()\ntf.random.set_seed(0)"
MODEL = """\
model = tf.keras.Sequential([tf.keras.layers.Input((64,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(10)])
model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))"""
FIT = """\
import json
x, y = load_digits(return_X_y=True)
history = model.fit((x / 16).astype("float32")[:512], y[:512], batch_size=64, epochs=2, shuffle=False, verbose=0)
json.dump({"loss": history.history["loss"]}, open("result.json", "w"))"""

BY_HAND = """\
import os
os.environ["KERAS_BACKEND"] = "torch"
import json, keras, numpy as np, allgpu
from sklearn.datasets import load_digits
strategy = allgpu.MirroredStrategy()
keras.utils.set_random_seed(0)
with strategy.scope():
    model = keras.Sequential([keras.layers.Input((64,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x, y = load_digits(return_X_y=True)
history = model.fit((x / 16).astype("float32")[:512], y[:512], batch_size=64, epochs=2, shuffle=False, verbose=0)
json.dump({"loss": history.history["loss"]}, open("by_hand.json", "w"))"""


def _execute(path, folder):
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
                   ).execute()
    return notebook


@pytest.mark.replicas
def test_a_migrated_notebook_runs_in_a_kernel_as_the_same_code_written_for_allgpu(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel's torch: two OpenMP threads crawl on a loaded 2-core CI
    cells = [new_markdown_cell("# digits"), new_code_cell(SETUP), new_code_cell(STRATEGY), new_code_cell(MODEL),
             new_code_cell(FIT)]
    path = tmp_path / "digits.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    assert main(["migrate", "--write", "--no-diff", str(path)]) == 0  # everything had an equivalent
    migrated = [c.source for c in nbformat.read(path, as_version=4).cells]
    assert "model = strategy.mirror(model)" in migrated[3] and "tensorflow" not in "".join(migrated)

    ran = _execute(path, tmp_path)
    assert any("shell line ran" in o.get("text", "") for o in ran.cells[1].outputs)
    (tmp_path / "by_hand.py").write_text(BY_HAND)
    done = run_python(["by_hand.py"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads((tmp_path / "result.json").read_text())["loss"]
    want = json.loads((tmp_path / "by_hand.json").read_text())["loss"]
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7) and got[1] < got[0]
