"""``allgpu.checkpoint.Checkpoint``: TensorFlow's ``tf.train.Checkpoint`` spelling on allgpu's checkpoint files.

``Checkpoint(model=model, optimizer=optimizer)`` then ``save(prefix)`` writes ``prefix-1``, ``prefix-2``, ... (one
file each, atomic, with a sha256 header: :mod:`allgpu.checkpoint.format`) and records it in the directory's
``checkpoint`` state file, as TensorFlow does (:mod:`allgpu.checkpoint.tf_layout`); ``restore(path)`` loads it back
in place and returns a :class:`CheckpointLoadStatus`. What each object saves: :mod:`allgpu.checkpoint.trackables`.

``save``, ``write``, ``restore`` and ``read`` are collectives under a multi-replica strategy: every replica calls
them (SPMD, as every replica runs ``checkpoint.save`` in a TensorFlow script); replica 0 writes and the others wait
for the file to be complete, then every replica reads the same file. A replica whose path replica 0 did not write
(a non-chief worker's temporary directory, as TensorFlow's multi-worker tutorials give) writes its own copy there. State is mirrored, so a checkpoint saved by N
replicas restores on any number.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import allgpu
from allgpu.checkpoint import collective, tf_layout, trackables
from allgpu.checkpoint.format import CorruptCheckpointError, read_file, write_file
from allgpu.checkpoint.preflight import directory_error, warn_open_accumulation
from allgpu.errors import ArgumentTypeError, CheckpointError
from allgpu.runtime.live import check_supported, mirror_pending

FORMAT = "allgpu.tf.Checkpoint/1"


class CheckpointLoadStatus:
    """What ``Checkpoint.restore`` matched (``tf.train.Checkpoint.restore``'s status object).

    Attributes:
        path: the checkpoint read, or None for ``restore(None)``.
        restored: names of this Checkpoint's objects loaded from the file.
        missing: names of this Checkpoint's objects the file does not hold (left as they are).
        unused: names the file holds that this Checkpoint has no object for (not loaded).
        deferred: Keras models or optimizers not built yet: their saved values are loaded when Keras builds the
            model (its first call; TensorFlow's restore-on-create), the optimizers' right after.
    """

    def __init__(self, path, restored=(), missing=(), unused=(), deferred=()):
        self.path = path
        self.restored, self.missing = list(restored), list(missing)
        self.unused, self.deferred = list(unused), list(deferred)
        self.partial_expected = False

    def _problem(self, parts: list[tuple[str, list]]) -> None:
        said = "; ".join(f"{what}: {', '.join(names)}" for what, names in parts if names)
        if said:
            raise CheckpointError(f"checkpoint {self.path} did not restore everything ({said}). Fix: give Checkpoint "
                                  "the same objects, built the same way, as when it was saved, or call "
                                  "status.expect_partial() if a partial restore is what you want.")

    def assert_consumed(self) -> "CheckpointLoadStatus":
        """Raise CheckpointError unless every saved value was loaded into an object and every object got one."""
        if self.path is None:
            raise CheckpointError("restore(None) restored nothing (no checkpoint was given): the objects keep their "
                                  "initial values. Fix: pass a path, e.g. latest_checkpoint(directory).")
        self._problem([("not in the file", self.missing), ("in the file, no object given", self.unused),
                       ("not built yet, so not loaded", self.deferred)])
        return self

    def assert_existing_objects_matched(self) -> "CheckpointLoadStatus":
        """Raise CheckpointError unless every object of this Checkpoint was loaded (extra saved values are fine)."""
        self._problem([("not in the file", self.missing), ("not built yet, so not loaded", self.deferred)])
        return self

    def assert_nontrivial_match(self) -> "CheckpointLoadStatus":
        """Raise CheckpointError unless at least one object was loaded."""
        if not self.restored:
            raise CheckpointError(f"checkpoint {self.path} matched none of this Checkpoint's objects.")
        return self

    def expect_partial(self) -> "CheckpointLoadStatus":
        """Mark a partial restore as intended; returns the status. (No warnings are printed either way: read
        ``missing``, ``unused`` and ``deferred`` for what was not loaded.)"""
        self.partial_expected = True
        return self

    def run_restore_ops(self, session=None) -> None:
        """Nothing to run: values were loaded when ``restore`` returned (TensorFlow's eager behaviour)."""

    def initialize_or_restore(self, session=None) -> None:
        """Nothing to run: values were loaded when ``restore`` returned (TensorFlow's eager behaviour)."""


class Checkpoint:
    """``tf.train.Checkpoint``: groups objects (``model=``, ``optimizer=``, ...) saved and restored together.

    Args:
        root: an object saved under the name ``"root"`` (TensorFlow's positional argument).
        **objects: named objects: ``torch.nn.Module``, ``torch.optim.Optimizer``, Keras models and optimizers
            (PyTorch backend), ``torch.Tensor``, or anything with ``state_dict()``/``load_state_dict()``.

    Attributes:
        save_counter: number of ``save`` calls so far (restored from the file by ``restore``); ``save`` writes
            ``prefix-{save_counter}``.

    Raises:
        TypeError: an object of another kind (the message names the argument).
    """

    def __init__(self, root=None, **objects):
        if root is not None:
            objects = {"root": root, **objects}
        self._objects: dict[str, Any] = dict(objects)
        self._kinds = {name: trackables.kind_of(name, obj) for name, obj in objects.items()}
        self.save_counter = 0
        self._wrote_copy = False  # the last save wrote this replica's own copy (a path replica 0 did not write)

    def __getattr__(self, name: str):
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(f"Checkpoint has no object named {name!r}; it holds {sorted(objects)}.")

    # -- writing -----------------------------------------------------------------------------------------------
    def save(self, file_prefix: str | os.PathLike, options=None) -> str:
        """Write ``{file_prefix}-{n}`` with ``n = save_counter + 1`` and record it in the directory's
        ``checkpoint`` state file. A collective: every replica calls it; replica 0 writes, every replica returns
        once the file is complete (or raises CheckpointError naming the replica that failed).

        Returns:
            the path written, a str (``"./training_checkpoints/ckpt-1"``), as TensorFlow returns it.
        """
        self.save_counter += 1
        path = self._write(f"{os.fspath(file_prefix)}-{self.save_counter}", record=True)
        return path

    def write(self, file_prefix: str | os.PathLike, options=None) -> str:
        """Write exactly ``file_prefix`` (no number, no state file, ``save_counter`` unchanged), as
        ``tf.train.Checkpoint.write``. A collective, like :meth:`save`. Returns the path, a str."""
        return self._write(os.fspath(file_prefix), record=False)

    def _write(self, path: str, *, record: bool, keep: list[str] | None = None) -> str:
        check_supported("checkpoint")
        mirror_pending()  # inside an open scope(): the first use of what it built
        warn_open_accumulation("Checkpoint.save" if record else "Checkpoint.write", collective.rank())
        if not isinstance(path, str) or not path:
            raise ArgumentTypeError(f"Checkpoint.save(file_prefix={path!r}): expected a file path prefix.")
        for name, obj in self._objects.items():
            trackables.check_savable(name, obj, self._kinds[name])
        target = Path(path)
        error = None
        if collective.rank() == 0:
            error = self._write_here(target, path, record, keep)
        collective.agree(error, f"writing checkpoint {path}")
        # A path only this replica names (TensorFlow's multi-worker tutorials give non-chief workers a temporary
        # directory, which they delete after save): it gets its own copy, as a TensorFlow worker writes one, so
        # the path returned exists here too. The state is mirrored: the copy equals replica 0's file.
        self._wrote_copy = collective.rank() != 0 and not target.exists()
        if self._wrote_copy:
            error = self._write_here(target, path, record, keep)
            if error is not None:
                raise error
        return path

    def _write_here(self, target: Path, path: str, record: bool, keep: list[str] | None) -> BaseException | None:
        """Write the file (and the directory's state file when ``record``) from this replica; the error, if any."""
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            payload = {"format": FORMAT, "allgpu_version": allgpu.__version__, "save_counter": self.save_counter,
                       "objects": {name: trackables.capture(obj, self._kinds[name])
                                   for name, obj in self._objects.items()}}
            write_file(target, payload)
            if record:
                _, listed = tf_layout.read_state(target.parent)
                kept = keep if keep is not None else [p for p in listed if Path(p) != target] + [path]
                tf_layout.write_state(target.parent, kept)
        except OSError as exc:
            return directory_error(target.parent, exc)
        except BaseException as exc:  # reported to every replica by agree(), then raised here
            return exc
        return None

    # -- reading -----------------------------------------------------------------------------------------------
    def restore(self, save_path: str | os.PathLike | None, options=None) -> CheckpointLoadStatus:
        """Load ``save_path`` (from :meth:`save`, :meth:`write` or ``latest_checkpoint``; a directory means its
        latest) into this Checkpoint's objects in place, and ``save_counter`` from it. ``None`` restores nothing
        (TensorFlow's start-from-scratch idiom). Every replica calls it (each reads the file; inside an open
        ``scope()`` it is the first use of what the scope built, a collective).

        Returns:
            :class:`CheckpointLoadStatus` (``assert_consumed()``, ``expect_partial()``, ...).

        Raises:
            CheckpointError: nothing readable at the path, a checksum that fails, a checkpoint TensorFlow wrote,
                or objects that do not fit (naming them and the fix).
        """
        check_supported("checkpoint")
        mirror_pending()
        if save_path is None:
            return CheckpointLoadStatus(None, missing=list(self._objects))
        path = _resolve(Path(os.fspath(save_path)))
        try:
            payload = read_file(path)
        except CorruptCheckpointError as exc:
            raise CheckpointError(f"cannot restore {path}: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise CheckpointError(f"{path} verifies but was not written by allgpu.checkpoint.Checkpoint. Fix: read "
                                  "files written by allgpu.checkpoint.save with allgpu.checkpoint.restore.")
        saved = payload["objects"]
        self._build_keras_optimizers(saved)
        restored, deferred = [], []
        for name, obj in self._objects.items():
            if name in saved:
                done = trackables.restore(name, obj, self._kinds[name], saved[name], path)
                (restored if done else deferred).append(name)
        self._restore_when_built(saved, path, deferred)
        self.save_counter = int(payload.get("save_counter", self.save_counter))
        return CheckpointLoadStatus(str(path), restored, [n for n in self._objects if n not in saved],
                                    [n for n in saved if n not in self._objects], deferred)

    def read(self, save_path: str | os.PathLike, options=None) -> CheckpointLoadStatus:
        """Load a file written by :meth:`write` (``tf.train.Checkpoint.read``); the same as :meth:`restore`."""
        return self.restore(save_path, options)

    def _restore_when_built(self, saved: dict, path: Path, deferred: list[str]) -> None:
        """Deferred Keras models load their values when Keras builds them (TensorFlow's restore-on-create), and then
        the deferred optimizers, built over the model's variables."""
        models = [n for n in deferred if self._kinds[n] == "keras"]
        optimizers = [n for n in deferred if self._kinds[n] == "keras_optimizer"]

        def optimizers_now() -> None:
            self._build_keras_optimizers({n: saved[n] for n in optimizers})
            for name in optimizers:
                trackables.restore(name, self._objects[name], "keras_optimizer", saved[name], path)

        for name in models:
            trackables.restore_when_built(name, self._objects[name], saved[name], path,
                                          optimizers_now if len(models) == 1 else lambda: None)

    def _build_keras_optimizers(self, saved: dict) -> None:
        """Build an unbuilt Keras optimizer over the one Keras model's trainable variables before loading its slots
        (Keras builds it at the first ``apply``; ``model.load_weights`` builds it the same way)."""
        models = [o for n, o in self._objects.items() if self._kinds[n] == "keras" and o.built]
        for name, obj in self._objects.items():
            if self._kinds[name] == "keras_optimizer" and not obj.built and name in saved and len(models) == 1:
                obj.build(models[0].trainable_variables)


def _resolve(path: Path) -> Path:
    """The checkpoint file ``path`` names: itself, or a directory's latest."""
    if path.is_dir():
        latest = tf_layout.latest(path)
        if latest is None:
            raise CheckpointError(f"no checkpoint in {path}: it has no readable checkpoint listed in a 'checkpoint' "
                                  "state file. Fix: pass the path save() returned, or latest_checkpoint(directory).")
        path = Path(latest)
    if tf_layout.written_by_tensorflow(path):
        raise CheckpointError(f"{path} was written by TensorFlow (its .index/.data tensor bundle), which allgpu "
                              "cannot read. Fix: save again from the allgpu script (allgpu.checkpoint.Checkpoint), or "
                              "export the weights from TensorFlow and load them into the model.")
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: it does not exist. Fix: pass the path save() returned, or "
                              "latest_checkpoint(directory) (None means start from scratch).")
    return path
