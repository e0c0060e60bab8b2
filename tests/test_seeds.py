"""The seed documents' code examples as the acceptance test of `allgpu migrate` (issue 20, part 5).

Every ```python example of ``../shared/seeds/*.txt`` is read at test time (its text is never committed here) and
migrated by `allgpu migrate`; the result must compile and pass `allgpu lint` with no error. Seed 004's two
``tf.device`` matmul examples (1 and 2) are not training code: migrate must report them as not converted, naming
``tf.device`` and why. Every other example is run, all of them one after another in one process per replica
(tests/seed_runner.py under ``allgpu run --cpu-replicas N``, the supported way to start N CPU replicas of an
unchanged script), on 1 and on 2 replicas, with these documented substitutions (tests/seed_examples.py):

* MNIST -> scikit-learn's digits in MNIST's shapes (tests/seed_digits.py: 8x8 padded to 28x28, 0..255, 1437
  train / 360 test), and MNIST's sizes in ``reshape(60000, 784)`` -> ``reshape(-1, 784)``;
* ``epochs=10`` and ``range(10)`` -> 2, for speed;
* what a document leaves to the reader: "data loading as in Example 1" (``x_train``, ``y_train`` given as the
  flattened digits, one-hot), seed 003's ``tf.keras.Sequential(...)`` "as in Example 1" (its Example 1's model),
  its ``epochs`` (1) and ``dataset`` (digits in batches of 32).

Each example then ends as its kind says: ``trains`` - no error, the 2-replica weights equal the 1-replica ones
(rtol 1e-4: the data order is fixed, fit's shuffle is seeded on replica 0 and shared) and both replicas hold the
same weights, and a digits classifier reaches a sensible held-out accuracy (>= 0.5, chance is 0.1); ``builds`` -
no training in the example: it runs on both replica counts, with the same initial weights. The two mistake
examples (000.2, 001.3: the model built outside ``strategy.scope()``) are fixed by migrate (``fixed`` note); the
same 000.2 with the fix taken out must stop with ``NotMirroredError`` naming the fix.

Beside the seeds, the same runner trains TensorFlow scripts written for these tests in the shapes of TensorFlow's
own guides (tests/migrate_cases: a custom loop with ``tf.nn.compute_average_loss``, ``Reduction.NONE``,
``strategy.reduce``; a functional Keras model with a callback), as a client's other scripts would be.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from allgpu.lint import check_source
from allgpu.migrate import migrate_source
from allgpu.migrate.notes import FIXED, NOT_CONVERTED
from tests.harness import run_python
from tests.seed_examples import examples, prepare, seeds_dir

SEEDS = seeds_dir()
NEEDS_SEEDS = pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the seed documents are not here ({SEEDS})")
# TensorFlow scripts written for these tests in the shapes of TensorFlow's own guides (a client's scripts beyond
# the seeds), run by the same runner: "case:NAME" for tests/migrate_cases/NAME.py.
CASES = Path(__file__).with_name("migrate_cases")

NOT_TRAINING = {"004.1", "004.2"}  # tf.device matmuls: reported by migrate as not converted
MISTAKES = {"000.2", "001.3"}       # the model built outside strategy.scope(): fixed by migrate
UNFIXED = "000.2-unfixed"           # 000.2 with migrate's fix taken out: allgpu's own error

KIND = {"000.1": "trains", "000.2": "trains", "000.3": "builds", "001.1": "builds", "001.2": "trains",
        "001.3": "trains", "002.1": "trains", "002.2": "trains", "002.3": "trains", "003.1": "trains",
        "003.2": "trains", "003.3": "builds", "004.3": "trains",
        "case:custom_loop": "trains", "case:keras_functional": "trains"}


def _all():
    return examples(SEEDS) if SEEDS.is_dir() else []


@functools.lru_cache(maxsize=1)
def _migrated():
    found = _all()
    ones = {e.seed: migrate_source(e.source, f"{e.name}.py", lint=False).result for e in found if e.number == 1}
    return tuple((e, migrate_source(e.source, f"seed_{e.name}.py"), ones.get(e.seed)) for e in found)


def _cases_migrated():
    return [(f"case:{p.stem}", migrate_source(p.read_text(), p.name)) for p in sorted(CASES.glob("*.py"))]


# -- migrate alone (unit tier) -----------------------------------------------------------------------------------
@NEEDS_SEEDS
def test_every_example_is_found():
    assert {e.name for e in _all()} == {n for n in KIND if not n.startswith("case:")} | NOT_TRAINING


@NEEDS_SEEDS
@pytest.mark.parametrize("name", sorted(n for n in set(KIND) | NOT_TRAINING if not n.startswith("case:")))
def test_migrated_example_compiles_and_passes_lint(name):
    (example, migration, _), = [m for m in _migrated() if m[0].name == name]
    compile(migration.result, f"{name}.py", "exec")
    errors = [f for f in check_source(migration.result, f"{name}.py") if f.severity == "error"]
    assert not errors, [str(f) for f in errors]
    assert "tf.distribute" not in migration.result and "tf.keras" not in migration.result
    if name in NOT_TRAINING:
        device = [n for n in migration.notes if n.kind == NOT_CONVERTED and n.message.startswith("tf.device")]
        lines = [n for n, line in enumerate(example.source.splitlines(), 1) if "tf.device(" in line]
        assert [n.line for n in device] == lines and "own device" in device[0].message
    else:
        assert migration.complete, migration.report()
    assert (name in MISTAKES) == any(n.kind == FIXED for n in migration.notes)


def test_written_cases_migrate_completely_and_pass_lint():
    found = _cases_migrated()
    assert {name for name, _ in found} == {n for n in KIND if n.startswith("case:")}
    for name, migration in found:
        assert migration.complete, migration.report()
        assert not [f for f in check_source(migration.result, name) if f.severity == "error"]


# -- the migrated examples, trained on 1 and 2 CPU replicas (replicas tier) ---------------------------------------
def _unfixed(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if ".mirror(model)  # allgpu migrate" not in line) + "\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("seeds")
    manifest = []
    for example, migration, example_one in _migrated():
        if example.name in NOT_TRAINING:
            continue
        text = prepare(migration.result, example_one)
        unfixed = [(UNFIXED, _unfixed(text))] if example.name == "000.2" else []
        for name, source in [(example.name, text), *unfixed]:
            path = folder / f"seed_{name.replace('.', '_').replace('-', '_')}.py"
            path.write_text(source)
            manifest.append([name, str(path)])
    for name, migration in _cases_migrated():
        path = folder / f"{name.replace(':', '_')}.py"
        path.write_text(migration.result)
        manifest.append([name, str(path)])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    runner = str(Path(__file__).with_name("seed_runner.py"))
    env = {**os.environ, "ALLGPU_TIMEOUT": "120"}  # an example that fails on one replica stops the other soon
    # 1 and 2 replicas at once: three processes on two cores, each importing TensorFlow, Keras and torch once.
    procs = {n: subprocess.Popen([sys.executable, "-m", "allgpu.cli.main", "run", "--cpu-replicas", str(n), runner,
                                  str(folder / "manifest.json"), str(folder / f"out{n}")],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder, env=env)
             for n in (1, 2)}
    logs = {n: p.communicate(timeout=500)[0] for n, p in procs.items()}
    return folder, logs


def _result(runs, replicas, name, rank=0):
    folder, logs = runs
    path = folder / f"out{replicas}" / f"{name}.{rank}.json"
    assert path.exists(), f"{name} did not finish on {replicas} replica(s):\n{logs[replicas][-3000:]}"
    return json.loads(path.read_text())


def _weights(folder, replicas, name, rank=0):
    with np.load(folder / f"out{replicas}" / f"{name}.{rank}.npz") as data:
        return [data[k] for k in data.files]


def _cases():
    for name in sorted(KIND):
        marks = [] if name.startswith("case:") else [NEEDS_SEEDS]
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.replicas
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(_cases()))
def test_migrated_example_runs_on_one_and_two_replicas(runs, name):
    folder, _ = runs
    one, two = _result(runs, 1, name), _result(runs, 2, name)
    for result in (one, two):
        assert "error" not in result, f"{result['error']}: {result['message']} (line {result['line']})"
    assert (one.get("replicas"), two.get("replicas")) == (1, 2)
    if "accuracy" not in one:
        return  # 000.3: a strategy made, nothing else
    w1, w2, w2b = (_weights(folder, 1, name), _weights(folder, 2, name), _weights(folder, 2, name, rank=1))
    for a, b, c in zip(w1, w2, w2b):
        np.testing.assert_array_equal(b, c)  # both replicas hold the same weights
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)  # and they are one replica's
    if KIND[name] == "trains" and one["accuracy"] is not None:
        assert min(one["accuracy"], two["accuracy"]) >= 0.5, (one["accuracy"], two["accuracy"])


@NEEDS_SEEDS
@pytest.mark.replicas
@pytest.mark.timeout(600)
def test_a_model_left_outside_the_scope_stops_with_the_fix(runs):
    result = _result(runs, 2, UNFIXED)
    assert result.get("error") == "NotMirroredError", result
    assert "scope()" in result["message"] and "Fix:" in result["message"]


@NEEDS_SEEDS
@pytest.mark.replicas
def test_the_migrate_command_on_a_seed_example(tmp_path):
    (example, _, _), = [m for m in _migrated() if m[0].name == "000.2"]
    script = tmp_path / "train.py"
    script.write_text(example.source)
    proc = run_python(["-m", "allgpu.cli.main", "migrate", "--write", str(script)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ": fixed: `model` was built outside strategy.scope()" in proc.stderr and "+model = strategy.mirror" \
        in proc.stdout
    assert migrate_source(script.read_text()).result == script.read_text()  # written, and nothing left to do
