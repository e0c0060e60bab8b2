"""Issue 21, TF001 in the shapes real TensorFlow code is written in (written cases, `tests/lint_cases/tf001_shapes/`):
a trainer class keeping the strategy on ``self`` and building in other methods, a strategy handed in or chosen by a
helper, factories, objects handed to a function or trainer class that trains them, GAN pairs, subclassed models, optimizers made in ``compile(...)``. ``p*`` files hold the pitfall
at the lines their comment-free bodies make obvious; ``n*`` files must stay clean (one-device or default strategy,
evaluation/export only, built before any strategy, scope entered through a helper or by the caller)."""

import pathlib

import pytest

from allgpu.lint import check_source

CASES = pathlib.Path(__file__).parent / "lint_cases" / "tf001_shapes"

# file -> (line, name in the message) of every TF001 it must report
EXPECTED = {
    "p1_self_strategy.py": {(9, "self.model"), (10, "self.optimizer")},
    "p2_self_strategy_step.py": {(6, "self.model")},
    "p3_factory.py": {(6, "model")},
    "p4_gan.py": {(14, "d_opt")},
    "p5_subclass.py": {(12, "model")},
    "p6_lazy_opt.py": {(6, "model.compile")},
    "p7_flag_strategy.py": {(6, "model"), (16, "optimizer")},
    "p8_trainer_attr.py": {(9, "self.opt")},
    "p9_fit_builds.py": {(8, "model"), (9, "m.compile")},
    "p10_handed_fn.py": {(7, "model")},
    "p11_passed_arg.py": {(21, "optimizer")},
    "p12_trainer_ctor.py": {(24, "optimizer")},
    "p13_gan_compile.py": {(33, "gan.compile"), (34, "gan.compile")},
    "p14_dcgan_loop.py": {(5, "generator")},
}


def _tf001(name: str) -> list:
    path = CASES / name
    return [f for f in check_source(path.read_text(), name, select=["TF001"]) if f.rule_id == "TF001"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pitfall_reported_at_its_line(name):
    found = _tf001(name)
    assert {f.line for f in found} == {line for line, _ in EXPECTED[name]}, [(f.line, f.message) for f in found]
    for line, what in EXPECTED[name]:
        assert any(f.line == line and f"`{what}" in f.message for f in found), (line, what)


@pytest.mark.parametrize("name", sorted(p.name for p in CASES.glob("n*.py")))
def test_no_pitfall_not_reported(name):
    assert _tf001(name) == []


def test_class_walked_only_when_it_keeps_a_strategy():
    """The same trainer without any strategy on ``self`` (nor in the file) is single-device code."""
    src = (CASES / "p1_self_strategy.py").read_text().replace(
        "self.strategy = tf.distribute.MirroredStrategy()", "self.device = '/gpu:0'").replace(
        "with self.strategy.scope():", "if True:")
    assert [f for f in check_source(src, "t.py", select=["TF001"]) if f.rule_id == "TF001"] == []


def test_default_strategy_on_self_is_not_a_strategy():
    src = (CASES / "p1_self_strategy.py").read_text().replace(
        "tf.distribute.MirroredStrategy()", "tf.distribute.get_strategy()")
    assert [f for f in check_source(src, "t.py", select=["TF001"]) if f.rule_id == "TF001"] == []
