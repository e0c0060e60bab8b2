"""`allgpu migrate notebook.ipynb`: code cells through the script codemods as one program; magics, shell lines,
outputs, markdown and cells that do not parse kept as they were; notes at cell and line."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from allgpu.cli.main import main
from allgpu.cli.run import script_and_args
from allgpu.errors import ArgumentError, MigrateInputError
from allgpu.migrate import migrate_file
from allgpu.migrate.notebook import migrate_notebook
from allgpu.migrate.notes import CHANGED, FIXED, LINT, NOT_CONVERTED

CELLS = [
    new_markdown_cell("# Digits"),
    new_code_cell("!pip install -q scikit-learn \\\n    numpy\n%matplotlib inline\nimport tensorflow as tf"),
    new_code_cell("strategy = tf.distribute.MirroredStrategy()\nprint(strategy.num_replicas_in_sync)"),
    new_code_cell("%%time\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(4)])\n"
                  "model.compile(optimizer='adam', loss='mse')"),
    new_code_cell("%%bash\necho tf.keras.Sequential"),
    new_code_cell("model.summary(\n"),
    new_code_cell("files = !ls\nfor f in files:\n    %time model.fit(x, y, epochs=1)\nmodel.fit(x, y, epochs=1)"),
]


def _notebook(cells=CELLS) -> str:
    nb = new_notebook(cells=[c.copy() for c in cells])
    nb.cells[6].outputs = [new_output("stream", name="stdout", text="Epoch 1/1\n")]
    return nbformat.writes(nb)


def _sources(raw: str) -> list[str]:
    return [c.source for c in nbformat.reads(raw, as_version=4).cells]


def test_cells_are_one_program_a_model_of_cell_4_mirrored_by_the_strategy_of_cell_3():
    m = migrate_notebook(_notebook())
    new = _sources(m.result)
    assert new[2].startswith("strategy = allgpu.MirroredStrategy()")
    assert "model = keras.Sequential([keras.layers.Dense(4)])" in new[3]
    assert "model = strategy.mirror(model)" in new[3]  # built outside the scope: fixed where it was built
    assert [(n.cell, n.line) for n in m.notes if n.kind == FIXED] == [(4, 2)]
    # the header opens the first code cell, before its shell lines; the kernel runs it first
    assert new[1].startswith('import os\nos.environ["KERAS_BACKEND"] = "torch"')
    assert new[1].endswith("!pip install -q scikit-learn \\\n    numpy\n%matplotlib inline")  # tf import dropped


def test_magics_shell_lines_outputs_markdown_and_other_cell_magics_are_kept_as_they_were():
    raw = _notebook()
    m = migrate_notebook(raw)
    old, new = _sources(raw), _sources(m.result)
    assert new[3].startswith("%%time\n")
    assert new[0] == old[0] and new[4] == old[4]  # markdown, %%bash (its text is not Python)
    assert new[6] == old[6]  # `files = !ls`, an indented %time line: nothing to migrate, untouched
    assert nbformat.reads(m.result, as_version=4).cells[6].outputs[0]["text"] == "Epoch 1/1\n"
    nbformat.validate(nbformat.reads(m.result, as_version=4))


def test_a_cell_that_does_not_parse_is_reported_and_kept_and_the_rest_migrated():
    m = migrate_notebook(_notebook())
    assert _sources(m.result)[5] == "model.summary(\n"
    bad = [n for n in m.notes if n.kind == NOT_CONVERTED]
    assert [(n.cell, n.line) for n in bad] == [(6, 1)] and "not valid Python on its own" in bad[0].message
    assert not m.complete
    assert any(n.kind == CHANGED and n.cell == 3 and n.line == 1 for n in m.notes)


def test_notes_and_lint_findings_give_cell_and_line():
    m = migrate_notebook(_notebook())
    report = m.report()
    assert "notebook.ipynb:cell 3:1: changed: tf.distribute.MirroredStrategy" in report
    lint = [n for n in m.notes if n.kind == LINT]
    assert any(n.cell == 6 and "E999" in n.message for n in lint)  # lint reads the result's cells too
    written = m.report(written=True)
    assert "notebook.ipynb:cell 3:1: changed" in written  # the written notebook's place (header is in cell 2)


def test_migrating_the_result_again_changes_nothing():
    once = migrate_notebook(_notebook())
    again = migrate_notebook(once.result)
    assert not again.changed and again.result == once.result


def test_a_writefile_cell_is_a_script_of_its_own():
    cells = [new_code_cell("%%writefile train.py\nimport tensorflow as tf\n"
                           "strategy = tf.distribute.MirroredStrategy()\n"),
             new_code_cell("!python train.py")]
    m = migrate_notebook(_notebook(cells + [new_code_cell("x = 1") for _ in range(5)]))
    new = _sources(m.result)
    assert new[0].startswith("%%writefile train.py\nimport allgpu\n") and "allgpu.MirroredStrategy()" in new[0]
    assert new[1] == "!python train.py"
    assert any(n.cell == 1 and n.line == 3 and n.message.startswith("train.py:") for n in m.notes)


def test_cli_writes_the_notebook_and_folders_include_notebooks(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook())
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").write_text(_notebook())
    assert main(["migrate", "--no-diff", str(tmp_path)]) == 1  # the bad cell is left: not complete
    err = capsys.readouterr().err
    assert "nb.ipynb:cell 3:1: changed" in err and "checkpoint" not in err
    assert main(["migrate", "--write", str(path)]) == 1
    assert "allgpu.MirroredStrategy()" in _sources(path.read_text())[2]
    assert isinstance(migrate_file(path), type(migrate_notebook(path.read_text()))) and not migrate_file(path).changed


def test_what_is_not_a_notebook_is_a_migrate_input_error(tmp_path):
    with pytest.raises(MigrateInputError, match="not a notebook"):
        migrate_notebook("{not json")


def test_allgpu_run_of_a_notebook_names_launch_instead_of_nameerror_null():
    for argv in (("nb.ipynb", []), ("python", ["nb.ipynb"])):
        with pytest.raises(ArgumentError, match="allgpu.launch"):
            script_and_args(*argv)


def test_kaggles_tpu_else_default_block_says_the_default_is_one_device_and_what_uses_every_gpu():
    block = ("import tensorflow as tf\ntry:\n    tpu = tf.distribute.cluster_resolver.TPUClusterResolver()\n"
             "    strategy = tf.distribute.TPUStrategy(tpu)\nexcept ValueError:\n"
             "    strategy = tf.distribute.get_strategy()\none = tf.distribute.OneDeviceStrategy('/gpu:0')\n")
    m = migrate_notebook(_notebook([new_code_cell(block)] + [new_code_cell("x = 1") for _ in range(6)]))
    assert "    strategy = allgpu.get_strategy()" in _sources(m.result)[0]
    by_line = {n.line: n.message for n in m.notes}
    assert "default strategy, one replica on one device" in by_line[6] and "MirroredStrategy()" in by_line[6]
    assert "no TPU strategy" in by_line[3] and "no TPU strategy" in by_line[4]  # the except branch runs, as in TF
    assert "several GPUs allgpu.MirroredStrategy()" in by_line[7]


def test_tensorflows_gpu_list_deciding_the_strategy_is_reported_with_torchs_count():
    cell = ("import tensorflow as tf\ngpus = tf.config.list_physical_devices('GPU')\n"
            "strategy = tf.distribute.MirroredStrategy() if gpus else tf.distribute.get_strategy()\n")
    m = migrate_notebook(_notebook([new_code_cell(cell)] + [new_code_cell("x = 1") for _ in range(6)]))
    left = [n.message for n in m.notes if n.kind == NOT_CONVERTED and n.line == 2]
    assert left and "lists no GPU even where PyTorch sees them" in left[0] and "torch.cuda.device_count()" in left[0]


def test_a_notebook_missing_keys_jupyters_schema_wants_is_migrated_as_lint_reads_it(tmp_path):
    path = tmp_path / "generated.ipynb"  # cells without metadata/outputs/execution_count, as generators write them
    path.write_text('{"cells": [{"cell_type": "code", "source": ["import tensorflow as tf\\n", '
                    '"s = tf.distribute.MirroredStrategy()"]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 2}')
    assert main(["migrate", "--write", "--no-diff", str(path)]) == 0  # was exit 2: "not a notebook nbformat can read"
    written = path.read_text()
    assert "allgpu.MirroredStrategy()" in written and '"cell_type": "code"' in written
