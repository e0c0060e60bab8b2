"""Issue 20, part 3: TensorFlow's checkpoint spelling (Checkpoint, CheckpointManager, latest_checkpoint) on allgpu's
atomic, verified files; in one process (the multi-replica run is tests/test_tf_checkpoint_seed.py)."""

import os

import numpy as np
import pytest
import torch

from allgpu import checkpoint
from allgpu.errors import CheckpointError


def _objects(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return model, optimizer, schedule, torch.zeros(2)


def _step(model, optimizer, schedule):
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    schedule.step()


def _snapshot(model, optimizer):
    return [p.detach().clone() for p in model.parameters()], optimizer.state_dict()["state"][0]["exp_avg"].clone()


def test_save_numbers_like_tensorflow_and_restore_loads_everything_back(tmp_path):
    model, optimizer, schedule, counter = _objects()
    ckpt = checkpoint.Checkpoint(model=model, optimizer=optimizer, schedule=schedule, counter=counter)
    _step(model, optimizer, schedule)
    counter += 7
    first = ckpt.save(tmp_path / "ckpts" / "ckpt")
    params, moment = _snapshot(model, optimizer)
    _step(model, optimizer, schedule)
    second = ckpt.save(os.path.join(tmp_path, "ckpts", "ckpt"))
    assert (first, second) == (str(tmp_path / "ckpts" / "ckpt-1"), str(tmp_path / "ckpts" / "ckpt-2"))
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["checkpoint", "ckpt-1", "ckpt-2"]
    assert checkpoint.latest_checkpoint(tmp_path / "ckpts") == second  # a str, as tf.train.latest_checkpoint's

    model2, optimizer2, schedule2, counter2 = _objects(seed=1)  # another process's fresh objects
    fresh = checkpoint.Checkpoint(model=model2, optimizer=optimizer2, schedule=schedule2, counter=counter2)
    status = fresh.restore(first)
    assert status.assert_consumed() is status and status.restored == ["model", "optimizer", "schedule", "counter"]
    got_params, got_moment = _snapshot(model2, optimizer2)
    assert all(torch.equal(a, b) for a, b in zip(got_params, params)) and torch.equal(got_moment, moment)
    assert schedule2.last_epoch == 1 and torch.equal(counter2, torch.full((2,), 7.0))
    assert fresh.save_counter == 1 and fresh.save(tmp_path / "ckpts" / "ckpt").endswith("ckpt-2")
    assert fresh.restore(tmp_path / "ckpts").path == second  # a directory means its latest
    assert fresh.model is model2  # objects are attributes, as in TensorFlow


def test_status_is_honest_about_what_was_not_restored(tmp_path):
    model, optimizer, _, _ = _objects()
    path = checkpoint.Checkpoint(model=model).save(tmp_path / "ckpt")
    status = checkpoint.Checkpoint(model=_objects()[0], optimizer=optimizer).restore(path)
    assert status.missing == ["optimizer"]
    with pytest.raises(CheckpointError, match="not in the file: optimizer"):
        status.assert_consumed()
    with pytest.raises(CheckpointError, match="not in the file: optimizer"):
        status.assert_existing_objects_matched()
    assert status.expect_partial() is status and status.assert_nontrivial_match() is status
    wider = checkpoint.Checkpoint(model=model, optimizer=optimizer).save(tmp_path / "wide")
    narrow = checkpoint.Checkpoint(model=model).restore(wider)
    assert narrow.unused == ["optimizer"] and narrow.assert_existing_objects_matched() is narrow
    with pytest.raises(CheckpointError, match="no object given: optimizer"):
        narrow.assert_consumed()
    none = checkpoint.Checkpoint(model=model).restore(None)  # TensorFlow's start-from-scratch idiom
    assert none.expect_partial() is none
    with pytest.raises(CheckpointError, match=r"restore\(None\) restored nothing"):
        none.assert_consumed()


def test_corrupt_newest_is_skipped_and_a_tensorflow_directory_is_recognised(tmp_path):
    model, optimizer, _, _ = _objects()
    ckpt = checkpoint.Checkpoint(model=model, optimizer=optimizer)
    first = ckpt.save(tmp_path / "ckpt")
    second = ckpt.save(tmp_path / "ckpt")
    data = bytearray(open(second, "rb").read())
    data[-10] ^= 0xFF
    open(second, "wb").write(bytes(data))
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        assert checkpoint.latest_checkpoint(tmp_path) == first
    with pytest.raises(CheckpointError, match="cannot restore"):
        ckpt.restore(second)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        ckpt.restore(tmp_path / "ckpt-9")

    tf_dir = tmp_path / "tf"
    tf_dir.mkdir()
    for name in ("ckpt-3.index", "ckpt-3.data-00000-of-00001"):
        (tf_dir / name).write_bytes(b"tensor bundle")
    (tf_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\n')
    assert checkpoint.latest_checkpoint(tf_dir) == str(tf_dir / "ckpt-3")
    with pytest.raises(CheckpointError, match="written by TensorFlow"):
        ckpt.restore(checkpoint.latest_checkpoint(tf_dir))


def test_manager_keeps_the_newest_and_picks_up_an_earlier_run(tmp_path):
    model, optimizer, schedule, _ = _objects()
    manager = checkpoint.CheckpointManager(checkpoint.Checkpoint(model=model, optimizer=optimizer), tmp_path / "m",
                                           max_to_keep=2)
    assert manager.latest_checkpoint is None and manager.restore_or_initialize() is None
    paths = []
    for _ in range(3):
        _step(model, optimizer, schedule)
        paths.append(manager.save())
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert manager.checkpoints == paths[1:] and manager.latest_checkpoint == paths[2]
    assert sorted(os.listdir(tmp_path / "m")) == ["checkpoint", "ckpt-2", "ckpt-3"]
    params, _ = _snapshot(model, optimizer)

    model2, optimizer2, _, _ = _objects(seed=3)  # a new run in the same directory
    again = checkpoint.CheckpointManager(checkpoint.Checkpoint(model=model2, optimizer=optimizer2), tmp_path / "m",
                                         max_to_keep=2)
    assert again.checkpoints == paths[1:] and again.restore_or_initialize() == paths[2]
    assert all(torch.equal(a, b) for a, b in zip(_snapshot(model2, optimizer2)[0], params))
    assert os.path.basename(again.save()) == "ckpt-4" and again.checkpoints == [paths[2], again.latest_checkpoint]
    assert again.save(checkpoint_number=10).endswith("ckpt-10")


def test_bad_arguments_are_typed_errors_naming_what(tmp_path):
    model, optimizer, _, _ = _objects()
    with pytest.raises(TypeError, match=r"Checkpoint\(step=...\) got a int.*torch.tensor"):
        checkpoint.Checkpoint(model=model, step=3)
    with pytest.raises(ValueError, match="max_to_keep=0"):
        checkpoint.CheckpointManager(checkpoint.Checkpoint(model=model), tmp_path, max_to_keep=0)
    with pytest.raises(TypeError, match="expected an allgpu.checkpoint.Checkpoint"):
        checkpoint.CheckpointManager(model, tmp_path, max_to_keep=1)
    other = checkpoint.Checkpoint(model=optimizer).save(tmp_path / "x")
    with pytest.raises(CheckpointError, match="saved from a optimizer"):
        checkpoint.Checkpoint(model=model).restore(other)


@pytest.mark.replicas  # importing Keras runs `uname -p` (platform), a process
def test_keras_model_and_optimizer_restore_into_fresh_unbuilt_objects(tmp_path):
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("Keras runs on another backend in this process")

    def build():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        return model, keras.optimizers.Adam(0.1)

    model, optimizer = build()
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x.numpy(), y.numpy(), epochs=2, batch_size=4, verbose=0)
    path = checkpoint.Checkpoint(model=model, optimizer=optimizer).save(tmp_path / "k")
    model2, optimizer2 = build()
    checkpoint.Checkpoint(model=model2, optimizer=optimizer2).restore(path).assert_consumed()
    assert int(optimizer2.iterations) == 4
    for a, b in zip(model.get_weights(), model2.get_weights()):
        assert (a == b).all()

    # A model without Input builds at its first call (TensorFlow's custom-training tutorial restores into
    # create_model() and evaluates it): restored when Keras builds it, the optimizer with it. Before, it kept
    # its initial weights and the evaluation ran at chance accuracy.
    lazy, lazy_optimizer = keras.Sequential([keras.layers.Dense(2)]), keras.optimizers.Adam(0.1)
    status = checkpoint.Checkpoint(model=lazy, optimizer=lazy_optimizer).restore(path)
    assert status.deferred == ["model", "optimizer"] and not lazy.built
    assert torch.allclose(lazy(x).detach().cpu(), model(x).detach().cpu())
    assert int(lazy_optimizer.iterations) == 4


class _Counter:
    """What tf.Variable and keras.Variable share: numpy() and assign() (TensorFlow's multi-worker custom-loop
    tutorial checkpoints its epoch and step counters as tf.Variable)."""

    def __init__(self, value):
        self.value = np.array(value, dtype=np.int64)

    def numpy(self):
        return self.value

    def assign(self, value):
        self.value = np.array(value, dtype=np.int64)


def test_a_variable_counter_is_saved_and_assigned_back(tmp_path):
    epoch, step = _Counter(2), _Counter(35)
    ckpt = checkpoint.Checkpoint(epoch=epoch, step_in_epoch=step)
    path = ckpt.save(tmp_path / "ckpt")
    epoch.assign(0), step.assign(0)
    ckpt.restore(path).assert_consumed()
    assert (int(epoch.numpy()), int(step.numpy())) == (2, 35)
    with pytest.raises(CheckpointError, match="shape"):
        checkpoint.Checkpoint(epoch=_Counter([1, 2]), step_in_epoch=step).restore(path)
