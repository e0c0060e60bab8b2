"""A checkpoint directory: naming, which checkpoint is the latest valid one, and keeping the last K.

Entries are ``ckpt-<step:09d>.pt`` (one file, see ``format.py``) or ``ckpt-<step:09d>/`` (a
``torch.distributed.checkpoint`` folder whose ``MANIFEST`` file, written last, lists every file with its
size and sha256). Names starting with ``.`` are temporaries of writes in progress or of crashed writes and
are never taken for checkpoints. "Latest" is the highest step that verifies; nothing else marks it, so
there is no pointer file that a crash could leave stale.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from allgpu.checkpoint.format import (
    TEMP_PREFIX,
    CorruptCheckpointError,
    read_file,
    sha256_of,
    verify_file,
)
from allgpu.errors import CheckpointError, warn_user

MANIFEST = "MANIFEST"
_NAME = re.compile(r"^ckpt-(\d{9,})(\.pt)?$")
STALE_TEMP_SECONDS = 3600.0


@dataclass(frozen=True)
class Entry:
    """One checkpoint in a directory: its step and whether it is a sharded (folder) checkpoint."""

    path: Path
    step: int

    @property
    def sharded(self) -> bool:
        return self.path.is_dir()


def file_name(step: int) -> str:
    return f"ckpt-{step:09d}.pt"


def folder_name(step: int) -> str:
    return f"ckpt-{step:09d}"


def is_checkpoint(path: Path) -> bool:
    """True for one checkpoint (a file, or a folder named ``ckpt-<step>`` or holding a ``MANIFEST``),
    False for a directory of checkpoints."""
    path = Path(path)
    return path.is_file() or (path / MANIFEST).exists() or bool(_NAME.match(path.name))


def entries(directory: Path) -> list[Entry]:
    """Checkpoints in ``directory``, newest (highest step) first; [] when the directory does not exist."""
    directory = Path(directory)
    if not directory.exists():
        return []
    if not directory.is_dir():
        raise CheckpointError(
            f"{directory} is a file, expected a checkpoint directory. Fix: pass the directory that "
            "holds the ckpt-*.pt files, or the checkpoint file itself to restore()."
        )
    found = []
    for child in directory.iterdir():
        match = _NAME.match(child.name)
        if match is None or (match.group(2) is None) != child.is_dir():
            continue
        found.append(Entry(child, int(match.group(1))))
    # A file and a folder for one step: the folder (sharded) first, an arbitrary but fixed order.
    return sorted(found, key=lambda e: (e.step, e.sharded), reverse=True)


class _VerifiedCache:
    """Remembers checkpoints already verified in this process, so pruning does not re-hash them each save."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, int, int]] = set()

    @staticmethod
    def _key(path: Path) -> tuple[str, int, int]:
        target = path / MANIFEST if path.is_dir() else path
        stat = target.stat()
        return (str(path.resolve()), stat.st_size, stat.st_mtime_ns)

    def add(self, path: Path) -> None:
        self._seen.add(self._key(path))

    def __contains__(self, path: Path) -> bool:
        try:
            return self._key(path) in self._seen
        except OSError:
            return False


VERIFIED = _VerifiedCache()


def verify(path: Path, *, use_cache: bool = False) -> None:
    """Verify a checkpoint file (header and sha256) or folder (manifest, then each listed file).

    Raises:
        CorruptCheckpointError: naming the file and what is wrong with it.
    """
    path = Path(path)
    if use_cache and path in VERIFIED:
        return
    try:
        if path.is_dir():
            manifest_path = path / MANIFEST
            if not manifest_path.exists():
                raise CorruptCheckpointError(f"{path}: no {MANIFEST} (the sharded write did not finish)")
            manifest = read_file(manifest_path)
            for name, (size, digest) in manifest["files"].items():
                member = path / name
                if not member.exists():
                    raise CorruptCheckpointError(f"{member}: listed in {MANIFEST} but missing")
                if member.stat().st_size != size:
                    raise CorruptCheckpointError(
                        f"{member}: {member.stat().st_size} bytes on disk, {MANIFEST} says {size} (truncated?)"
                    )
                if sha256_of(member) != digest:
                    raise CorruptCheckpointError(f"{member}: sha256 mismatch (bit-flipped or overwritten)")
        else:
            verify_file(path)
    except FileNotFoundError as exc:
        raise CorruptCheckpointError(f"{path}: disappeared while being verified ({exc})") from exc
    VERIFIED.add(path)


def latest(directory: Path, *, warn: bool = True) -> Path | None:
    """Newest checkpoint in ``directory`` that verifies; each newer one that fails is skipped with a warning."""
    for entry in entries(directory):
        try:
            verify(entry.path, use_cache=False)
        except CorruptCheckpointError as exc:
            if warn:
                warn_user(
                    f"allgpu: skipping checkpoint {exc}. Falling back to the previous one.")
            continue
        return entry.path
    return None


CORRUPT_FOLDER = "corrupt"


def move_aside(path: Path, reason: str = "") -> Path:
    """Move a checkpoint that failed verification into ``<directory>/corrupt/`` (never delete it: it may be the
    only copy of a long run, and a person may want to look at it); warn saying where. Returns the new path."""
    path = Path(path)
    target_dir = path.parent / CORRUPT_FOLDER
    target_dir.mkdir(exist_ok=True)
    target = target_dir / path.name
    n = 1
    while target.exists():
        target, n = target_dir / f"{path.name}.{n}", n + 1
    path.rename(target)
    warn_user(f"allgpu: checkpoint {path} failed verification{': ' + reason if reason else ''}; moved to "
                  f"{target} (not deleted).")
    return target


def set_aside_if_corrupt(path: Path) -> None:
    """Before a write replaces ``path``: move it aside if it exists and fails verification (never overwrite it)."""
    if Path(path).is_file():  # a folder squatting on the name is not a checkpoint: the write fails as it should
        try:
            verify(path, use_cache=True)
        except CorruptCheckpointError as exc:
            move_aside(path, str(exc))


def prune(directory: Path, keep: int | None, *, protect: Path | None = None) -> list[Path]:
    """Delete checkpoints older than the ``keep`` newest verified ones; return what was deleted or moved.

    A checkpoint that fails verification is never deleted: it is moved into ``<directory>/corrupt/`` with a
    warning. ``protect`` (the checkpoint just written) is never touched. Temporaries older than one hour, left
    by crashed writes, are removed.
    """
    removed: list[Path] = []
    if keep is not None:
        kept = 0
        for entry in entries(directory):
            if entry.path == protect:
                kept += 1
                continue
            try:
                verify(entry.path, use_cache=True)
            except CorruptCheckpointError as exc:
                try:
                    move_aside(entry.path, str(exc))
                    removed.append(entry.path)
                except OSError:
                    pass  # cannot move it: leave it where it is, still not deleted
                continue
            if kept >= keep:
                _remove(entry.path)
                removed.append(entry.path)
            else:
                kept += 1
    now = time.time()
    for child in Path(directory).iterdir():
        if child.name.startswith(TEMP_PREFIX):
            try:
                if now - child.stat().st_mtime > STALE_TEMP_SECONDS:
                    _remove(child)
                    removed.append(child)
            except FileNotFoundError:
                pass
    return removed


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
