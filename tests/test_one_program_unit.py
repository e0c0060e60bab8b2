"""Issue 24, item 1 (in-process parts): the data fingerprint and how two fingerprints are compared."""

import numpy as np
import pytest
import torch

from allgpu.core.one_program import _difference, _seed_tensorflow, fingerprint


def test_the_fingerprint_names_a_length_or_an_example_that_differs():
    data = torch.arange(100.0).reshape(50, 2)
    same = fingerprint(50, data.__getitem__)
    assert same == fingerprint(50, data.clone().__getitem__) and _difference(same, same, 1) is None
    shorter = fingerprint(49, data.__getitem__)
    assert _difference(same, shorter, 1) == "replica 0's data has 50 examples, replica 1's 49"
    changed = data.clone()
    changed[30] += 1
    assert "example 30 differs between replica 0 and replica 3" in _difference(
        same, fingerprint(50, changed.__getitem__), 3)
    assert [i for i, _ in same[1]] == [0, 10, 20, 30, 40, 49]  # first, last, four between: cheap at any size


def test_examples_that_change_between_two_reads_are_not_compared():
    rng = np.random.default_rng()  # a dataset's own unseeded generator: augmentation, not different data
    noisy = fingerprint(10, lambda i: np.float64(i) + rng.random())
    assert all(d is None for _, d in noisy[1])
    assert _difference(noisy, fingerprint(10, lambda i: np.float64(i) + rng.random()), 1) is None


@pytest.mark.replicas  # in-process, but importing TensorFlow starts a helper process
def test_tensorflow_gets_a_seed_from_the_shared_state_unless_the_user_set_one():
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.eager import context

    try:
        tf.random.set_seed(7)
        _seed_tensorflow()
        assert context.global_seed() == 7  # the user's seed is kept
        tf.random.set_seed(None)
        np.random.seed(3)
        _seed_tensorflow()
        first = context.global_seed()
        assert first is not None and np.random.randint(1 << 30) == np.random.RandomState(3).randint(1 << 30)
        tf.random.set_seed(None)
        np.random.seed(3)
        _seed_tensorflow()
        assert context.global_seed() == first  # derived from NumPy's (shared) state, which it does not draw from
    finally:
        tf.random.set_seed(None)
