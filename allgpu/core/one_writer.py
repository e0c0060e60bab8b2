"""Saves as one program makes them: a file that every replica "writes" is written once, by replica 0, and the
others return only once it is complete, so reading it right after works on every replica.

``tf.distribute`` lets every worker call ``model.save``: non-chief workers write into temporary folders that are
deleted, and the chief writes where asked. Here replicas share a file system far more often (several on one
machine), and two replicas writing one file interleave into a corrupt one (``zipfile.BadZipFile: Bad CRC-32``),
while a replica reading a file replica 0 is still writing reads a partial one. So :meth:`OneWriter.write`:

- on replica 0 writes into a temporary name beside the target (same suffix, so Keras accepts it), renames it over
  the target (``os.replace``: readers see the old file or the new one, never a partial one), then publishes the
  write's generation for that path in the job's store;
- on the other replicas waits (not a collective: replica 0 never waits for them) until replica 0's matching write
  is complete, then returns; a replica naming its own file (``f"model{rank}.keras"``, or a non-chief worker's
  temporary folder as in TensorFlow's multi-worker tutorial) writes it itself, and also returns only once replica
  0's write is complete, so reading replica 0's file right after works (the tutorial's ``load_model``). For a save
  that is itself a collective (a sharded model gathers its shards), the other replicas first run it into a scratch
  file that is deleted, as ``tf.distribute``'s non-chief workers do.

So a save guarded by ``if strategy.is_chief:`` works as before (replica 0 writes; nobody waits for anybody), and an
unguarded one works too. A replica that fails reading such a file gets a note saying which form to use
(:func:`read_hint`).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable

from allgpu.errors import CheckpointError, ReplicaFailedError

_KEY = "allgpu/written/{}"  # replica 0's k-th write: "path\nwriting" | "path\ndone" | "path\nerror ..."
POLL_S = 0.02


class OneWriter:
    """Writes files once for the whole job. ``group`` is the :class:`allgpu.core.replica_group.ReplicaGroup`.

    Replica 0 numbers its writes and publishes each one's path and state in the job's store; another replica's
    k-th write is matched with replica 0's k-th: the same path waits for it, a different path (each replica naming
    its own file) is written by that replica itself.
    """

    def __init__(self, group):
        self.group = group
        self.count = 0  # writes asked of this replica so far

    def write(self, path, write: Callable[[str], object], what: str, *, collective: bool = False,
              in_place: bool = False):
        """Run ``write(target)`` so that ``path`` is written once, by replica 0; returns ``write``'s result there.

        Args:
            path: the file (or folder) the user named.
            write: writes to the name it is given.
            what: the user's call, for messages (``"model.save"``).
            collective: ``write`` is itself a collective (gathers shards): other replicas run it too, into a
                scratch name deleted afterwards.
            in_place: replica 0 writes into ``path`` itself, not a temporary name renamed over it: a folder
                that keeps what else it holds (``save_pretrained``'s output directory, with a tokenizer's files
                or checkpoints beside the weights). The others still wait until it is complete.

        Raises:
            CheckpointError: replica 0 failed writing (every waiting replica raises it too), or made no matching
                write within the job's timeout (it does not make this call: a save on some replicas only).
        """
        if self.group.world_size == 1 or self.group.ledger.store is None:
            return write(str(path))
        target = Path(os.path.abspath(os.fspath(path)))
        self.count += 1
        key = _KEY.format(self.count)
        if self.group.rank == 0:
            return self._write_here(target, write, key, in_place)
        theirs = self._wait(key, target, what, lambda state: True)
        if theirs != str(target):
            # This replica names its own file: it writes it, and returns once replica 0's file is complete too
            # (TensorFlow's multi-worker tutorial saves a non-chief's copy, deletes it, then loads the chief's).
            result = write(str(path))
            self._wait(key, target, what, lambda state: state != "writing")
            return result
        if collective:
            scratch = _scratch_name(target, self.group.rank)
            try:
                write(str(scratch))
            finally:
                _remove(scratch)
        self._wait(key, target, what, lambda state: state != "writing")
        return None

    def _write_here(self, target: Path, write, key: str, in_place: bool = False):
        temporary = _scratch_name(target, 0)
        store = self.group.ledger.store
        store.set(key, f"{target}\nwriting")
        if in_place:
            try:
                result = write(str(target))
            except BaseException as exc:
                store.set(key, f"{target}\nerror {type(exc).__name__}: {exc}")
                raise
            store.set(key, f"{target}\ndone")
            return result
        try:
            result = write(str(temporary))
            if temporary.is_dir() and target.is_dir():
                shutil.rmtree(target)
            os.replace(temporary, target)
        except BaseException as exc:
            _remove(temporary)
            store.set(key, f"{target}\nerror {type(exc).__name__}: {exc}")
            raise
        store.set(key, f"{target}\ndone")
        return result

    def _wait(self, key: str, target: Path, what: str, ready: Callable[[str], bool]) -> str:
        """Wait until replica 0's record under ``key`` satisfies ``ready(state)``; return its path."""
        store, deadline = self.group.ledger.store, time.monotonic() + self.group.timeout_s
        while True:
            try:
                value = store.get(key).decode() if store.check([key]) else None
            except Exception as exc:  # the store lives in replica 0's process
                raise ReplicaFailedError(f"replica {self.group.rank} waited for replica 0 to write {target} "
                                         f"({what}), but the job's store is gone: replica 0 has exited.",
                                         rank=0) from exc
            if value is not None:
                path, _, state = value.partition("\n")
                if state.startswith("error") and path == str(target):
                    raise CheckpointError(f"replica 0 failed writing {target} ({what}): {state[len('error '):]}")
                if ready(state):
                    return path
            if time.monotonic() > deadline:
                raise CheckpointError(
                    f"replica {self.group.rank} waited {self.group.timeout_s:g} s in {what}({target.name}) for "
                    f"replica 0 to make the same write, and it did not: it does not make this call here (a save "
                    "on some replicas only, or in a different order). Fix: call it on every replica (replica 0 "
                    "writes, the others wait), or only on replica 0.")
            time.sleep(POLL_S)


def _scratch_name(target: Path, rank: int) -> Path:
    # Same folder (os.replace stays on one file system) and the same ending (Keras checks ".keras",
    # ".weights.h5").
    return target.with_name(f".allgpu-tmp-{os.getpid()}-r{rank}-{target.name}")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


_READ_FAILURES = ("File not found", "Bad CRC-32", "PytorchStreamReader failed", "Ran out of input",
                  "not a zip file", "File is not a zip file", "truncated", "Unable to open file",
                  "unable to open file", "No such file or directory",
                  "no file named", "Error while deserializing header")  # transformers' from_pretrained, safetensors


def read_hint(exc: BaseException, rank: int) -> str | None:
    """For a replica other than 0 that failed reading a file (missing, partial, corrupt): the note naming the
    likely cause in a job (replica 0 writes it under ``if strategy.is_chief:``, unawaited) and the fix."""
    zip_error = type(exc).__name__ == "BadZipFile"
    file_error = (isinstance(exc, (OSError, ValueError, EOFError, RuntimeError))
                  or type(exc).__name__ == "SafetensorError") and \
        any(text in str(exc) for text in _READ_FAILURES)
    if rank == 0 or not (zip_error or file_error):
        return None
    return (f"allgpu: replica {rank} failed reading a file. If replica 0 writes it under `if strategy.is_chief:`, "
            "the other replicas read it before it exists or while it is being written. Fix: call the save on every "
            "replica (model.save, model.save_weights, torch.save(strategy.full_state_dict(model), path), "
            "allgpu.checkpoint.save, a Hugging Face model's save_pretrained): replica 0 writes and the others return once the file is complete; or call "
            "strategy.barrier() after the guarded save, before reading.")


def exists_hint(exc: BaseException) -> str | None:
    """For a replica whose ``os.makedirs`` / ``os.mkdir`` found the path already there: the note naming the race
    (every replica runs ``if not os.path.exists(d): os.makedirs(d)``, as in Keras' multi-GPU guide; in
    ``tf.distribute``'s one program the check and the creation cannot be split by another replica) and the fix."""
    if not isinstance(exc, FileExistsError):
        return None
    return ("allgpu: every replica runs this line, and another replica created the same path between this one's "
            "check and its creation (one program's `if not os.path.exists(d): os.makedirs(d)` is a race across "
            "replicas). Fix: os.makedirs(d, exist_ok=True), which every replica may call.")
