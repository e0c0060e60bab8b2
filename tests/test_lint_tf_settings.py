"""Issue 21, TF007 and TF001 through the settings objects notebooks and scripts keep (written cases,
`tests/lint_cases/tf_settings/`): a Kaggle-style ``class CFG: batch_size = 16`` read as ``CFG.batch_size``, a
settings dict literal read as ``config["batch_size"]``, and a metric made outside the scope and written into
``compile(metrics=[auc])`` by name. ``p*`` files hold the pitfall at the listed line; ``n*`` files must stay clean
(the setting rescaled by the replica count, a metric made in the scope or used only to evaluate, an instance's
attribute set from the command line)."""

import pathlib

import pytest

from allgpu.lint import check_source

CASES = pathlib.Path(__file__).parent / "lint_cases" / "tf_settings"

# file -> {(rule, line or "cell N:line")}
EXPECTED = {
    "p1_cfg_class.py": {("TF007", 14)},
    "p2_dict_config.py": {("TF007", 11)},
    "p3_metric_named.py": {("TF001", 5)},
    "p4_cfg_notebook.ipynb": {("TF007", "cell 4:2")},
}


def _findings(name: str) -> set:
    found = check_source((CASES / name).read_text(), name, select=["TF001", "TF007"])
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
