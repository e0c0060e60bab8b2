"""The seed documents' fifteen code examples are the acceptance test of `allgpu lint` (issue 21, part 4).

The examples are read from the seed documents (``../shared/seeds/*.txt`` next to the repository) at test time:
their text is never committed here, only which example is a mistake, which rule must report it, at which line
of the example (1-based, inside the ```python block), and a sha256 of the example (a changed seed fails loudly
instead of checking lines that moved). Every check runs with the default rules (no ``select``), and every
expected finding must carry its fix in the message (``Fix: ...``). The correct examples must get no error.

Reading each document (the numbers are the examples in order):

* 000 (why only one GPU when building gradients): 1 correct (all under the scope), 2 the model is built and
  compiled outside ``strategy.scope()`` then fitted (TF001), 3 correct (visible devices "0,1", a fallback).
* 001 (one GPU despite MirroredStrategy): 1 "incorrect device visibility": the narrowing line is commented out
  in the example (``# os.environ['CUDA_VISIBLE_DEVICES'] = '1'``, "this will use only device 1"), so the file
  as written is clean and the line, enabled as the comment describes, must be TF003; 2 "data pipeline issues":
  one serial pipeline built by a helper with a fixed batch of 32 (TF007 at the call, the helper followed), and
  the same pipeline fed to training without ``experimental_distribute_dataset`` (which adds a prefetch to the
  devices itself, TensorFlow's "Distributed input" guide) must be TF008; 3 model and optimizer outside the
  scope (TF001 twice).
* 002 (all three presented as correct): 1 ``fit(batch_size=128)`` never scaled by ``num_replicas_in_sync``
  (TF007, a warning, issue 21); 2 and 3 the same in ``.batch(128)``, and their step calls a Keras loss with the
  default reduction inside ``strategy.run``: TF2's Keras refuses it with a ValueError, Keras 3 divides by the
  per-replica batch (TF006, an error the document does not see: the only error allowed on a "correct" one).
* 003: 1 basic fit (TF007 warning only), 2 "gradient accumulation" that applies gradients on every micro-step
  (TF010) and calls the step directly instead of through ``strategy.run`` (TF005), 3 correct.
* 004: 1 everything pinned to ``/gpu:0`` with ``tf.device`` (TF002), 2 manual placement on two GPUs
  ("inefficient", not a single-GPU pitfall: nothing required, nothing forbidden), 3 correct.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from allgpu.lint import check_source
from tests.seed_examples import seeds_dir

pytestmark = pytest.mark.unit

SEEDS = seeds_dir()

# (document, example) -> (sha256 prefix of the example, kind, {rule: acceptable lines}, errors allowed)
# kind: "mistake" (every listed rule at one of its lines), "correct" (listed rules too, and no other error),
# "neither" (nothing required, nothing forbidden).
EXPECTED = {
    ("000", 1): ("09aa94b623ed760a", "correct", {}, set()),
    ("000", 2): ("663d55cce0c22cd1", "mistake", {"TF001": {5}}, None),
    ("000", 3): ("2d0084ccc93e2151", "correct", {}, set()),
    ("001", 1): ("15464478f68f1a71", "correct", {}, set()),
    ("001", 2): ("78030ff01284b051", "mistake", {"TF007": {15}}, None),
    ("001", 3): ("3b138925c57819bb", "mistake", {"TF001": {3, 7}}, None),
    ("002", 1): ("bb4aee4ba17b3fa6", "correct", {"TF007": {25}}, set()),
    ("002", 2): ("92ec8ac01e8a5e35", "correct", {"TF007": {19}, "TF006": {26}}, {"TF006"}),
    ("002", 3): ("f239ee7e9027d6e1", "correct", {"TF007": {22}, "TF006": {29}}, {"TF006"}),
    ("003", 1): ("a368d720503db0ec", "correct", {"TF007": {20}}, set()),
    ("003", 2): ("302f6e54665e66d5", "mistake", {"TF010": {16, 20}, "TF005": {21}}, None),
    ("003", 3): ("d5035be89558d9d0", "correct", {}, set()),
    ("004", 1): ("f5fb94699438fb99", "mistake", {"TF002": {3}}, None),
    ("004", 2): ("2139146a7a542d49", "neither", {}, None),
    ("004", 3): ("ed5d6e155d4bb476", "correct", {}, set()),
}
# Both lines of a TF001 pair must be reported (model and optimizer), not just one of them.
ALL_LINES = {("001", 3, "TF001")}


def examples() -> dict[tuple[str, int], str]:
    """Every ```python block of every seed document, keyed by (document number, example number)."""
    if not SEEDS.is_dir():
        pytest.skip(f"the seed documents are not next to the repository ({SEEDS} is absent)")
    out = {}
    for doc in sorted(SEEDS.glob("*.txt")):
        blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
        for i, code in enumerate(blocks, 1):
            out[(doc.name[:3], i)] = code
    return out


def _check(key, code):
    digest, kind, rules, allowed = EXPECTED[key]
    assert hashlib.sha256(code.encode()).hexdigest().startswith(digest), \
        f"seed {key[0]} example {key[1]} changed: re-read it and update EXPECTED"
    found = check_source(code, f"seed_{key[0]}_ex{key[1]}.py")
    for rid, lines in rules.items():
        hits = [f for f in found if f.rule_id == rid and f.line in lines]
        assert hits, f"seed {key}: {rid} not reported at line {sorted(lines)}; got {[str(f.location) + ' ' + f.rule_id for f in found]}"
        if (*key, rid) in ALL_LINES:
            assert {f.line for f in hits} == lines, (key, rid, [f.line for f in hits])
        for f in hits:
            assert "Fix: " in f.message, f.message
    if kind == "correct":
        errors = [f"{f.rule_id}:{f.line} {f.message}" for f in found
                  if f.severity == "error" and f.rule_id not in allowed]
        assert not errors, f"seed {key} is correct code, yet: {errors}"
    return found


def test_fifteen_examples_found():
    assert sorted(examples()) == sorted(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"seed{k[0]}-ex{k[1]}")
def test_seed_example(key):
    _check(key, examples()[key])


def test_seed_001_ex1_visible_devices_line_enabled():
    """The example's commented-out line, enabled as its comment describes ("this will use only device 1")."""
    code = examples()[("001", 1)]
    line = "# os.environ['CUDA_VISIBLE_DEVICES'] = '1'"
    assert line in code
    found = check_source(code.replace(line, line[2:]), "seed_001_ex1_enabled.py")
    hits = [f for f in found if f.rule_id == "TF003" and f.line == 8]
    assert hits and "Fix: " in hits[0].message, found


def test_seed_001_ex2_pipeline_without_distribution():
    """The serial pipeline fed straight to the loop: nothing prefetches it (TF008 in the helper or at the feed)."""
    code = examples()[("001", 2)]
    dist = "strategy.experimental_distribute_dataset(dataset)"
    assert dist in code
    found = check_source(code.replace(dist, "dataset"), "seed_001_ex2_plain.py")
    hits = [f for f in found if f.rule_id == "TF008" and f.line in (8, 9, 15, 16)]
    assert hits and "Fix: " in hits[0].message, found
