"""TensorFlow's checkpoint directory layout: numbered prefixes (``ckpt-1``, ``ckpt-2``) and the ``checkpoint`` state file.

``tf.train.Checkpoint.save(prefix)`` writes ``prefix-N`` and records it in a text file named ``checkpoint`` in the
same directory (``model_checkpoint_path: "ckpt-2"`` and one ``all_model_checkpoint_paths:`` line per kept
checkpoint); ``tf.train.latest_checkpoint(dir)`` reads that file. allgpu's TF spelling
(:mod:`allgpu.checkpoint.tf_checkpoint`) writes the same names and state file, each ``prefix-N`` one file in
allgpu's atomic, checksummed format (:mod:`allgpu.checkpoint.format`). Since a state file is a pointer that a crash
can leave one save behind, :func:`latest` also looks at the numbered files on disk and returns the highest number
that verifies, skipping (with a warning) one that does not. A directory TensorFlow itself wrote (``ckpt-1.index``
+ ``ckpt-1.data-00000-of-00001``) is recognised: its latest prefix is returned, as TensorFlow would.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from allgpu.checkpoint.format import CorruptCheckpointError, fsync_dir, temp_path_for, verify_file

STATE_FILE = "checkpoint"  # TensorFlow's name for the state file
_LINE = re.compile(r'^\s*(\w+)\s*:\s*"(.*)"\s*$')
_NUMBERED = re.compile(r"^(.+)-(\d+)$")


def read_state(directory: str | os.PathLike) -> tuple[str | None, list[str]]:
    """``(model_checkpoint_path, all_model_checkpoint_paths)`` from ``directory/checkpoint``, as absolute
    paths; ``(None, [])`` when there is no state file."""
    path = Path(directory) / STATE_FILE
    if not path.is_file():
        return None, []
    latest, every = None, []
    for line in path.read_text(errors="replace").splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        key, value = match.groups()
        value = value if os.path.isabs(value) else os.path.join(os.fspath(directory), value)  # TF's spelling
        if key == "model_checkpoint_path":
            latest = value
        elif key == "all_model_checkpoint_paths":
            every.append(value)
    return latest, every


def write_state(directory: Path, paths: list[str]) -> None:
    """Write ``directory/checkpoint`` atomically, listing ``paths`` (oldest first; the last is the latest), in
    TensorFlow's text format with paths relative to ``directory``. Replica 0 only."""
    directory = Path(directory)
    names = [os.path.relpath(p, directory) if Path(p).parent.resolve() == directory.resolve() else str(p)
             for p in paths]
    lines = [f'model_checkpoint_path: "{names[-1]}"'] if names else []
    lines += [f'all_model_checkpoint_paths: "{n}"' for n in names]
    final = directory / STATE_FILE
    tmp = temp_path_for(final)
    try:
        with open(tmp, "w") as stream:
            stream.write("\n".join(lines) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(directory)


def number_of(path: str) -> int | None:
    """N of ``prefix-N``, or None."""
    match = _NUMBERED.match(Path(path).name)
    return int(match.group(2)) if match else None


def written_by_tensorflow(prefix: str | Path) -> bool:
    """True when ``prefix`` names a checkpoint TensorFlow wrote (``prefix.index`` beside no file ``prefix``)."""
    return Path(f"{prefix}.index").is_file() and not Path(prefix).is_file()


def _candidates(directory: str | os.PathLike) -> list[str]:
    """Listed paths and, for each listed name, the numbered files on disk beside them; highest number first."""
    latest, every = read_state(directory)
    folder = Path(directory)
    listed = every + ([latest] if latest else [])
    stems = {_NUMBERED.match(Path(p).name).group(1) for p in listed if _NUMBERED.match(Path(p).name)}
    on_disk = []
    if folder.is_dir():
        for entry in folder.iterdir():
            match = _NUMBERED.match(entry.name.removesuffix(".index"))
            if match and match.group(1) in stems:
                on_disk.append(os.path.join(os.fspath(directory), match.group(0)))
    unique = list(dict.fromkeys(listed + on_disk))
    return sorted(unique, key=lambda p: (number_of(p) or -1, unique.index(p)), reverse=True)


def latest(directory: str | os.PathLike, *, warn: bool = True) -> str | None:
    """The newest checkpoint prefix of a directory in TensorFlow's layout that can be read, or None.

    Returns None as well when ``directory`` has no ``checkpoint`` state file (not TensorFlow's layout). An
    allgpu-written file that fails verification is skipped with a warning naming it; a TensorFlow-written
    prefix is returned as it is (TensorFlow's answer; allgpu cannot read its tensor bundles).
    """
    for path in _candidates(directory):
        if Path(path).is_file():
            try:
                verify_file(Path(path))
            except CorruptCheckpointError as exc:
                if warn:
                    warnings.warn(f"allgpu: skipping checkpoint {exc}. Falling back to the previous one.",
                                  stacklevel=3)
                continue
            return path
        if written_by_tensorflow(path):
            return path
    return None
