"""One checkpoint file: a checksummed header, then a ``torch.save`` payload, written atomically.

Layout (little-endian)::

    b"ALLGPUCK" | u32 format version | 32-byte sha256 of the payload | u64 payload length | payload

The header is what lets a truncated file (length mismatch) or a bit-flipped one (digest mismatch) be
rejected *before* ``torch.load`` reads it. The write follows the usual POSIX recipe for atomic
replacement: temp file in the same directory, ``fsync``, ``os.replace``, ``fsync`` of the directory, so a
crash leaves either the old state or the new file, never a half-written file under the final name.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import torch

from allgpu.errors import CorruptCheckpointError  # re-exported: its home was here

MAGIC = b"ALLGPUCK"
VERSION = 1
_HEADER = struct.Struct("<8sI32sQ")
HEADER_SIZE = _HEADER.size  # 52 bytes
_CHUNK = 1 << 20  # 1 MiB read size when hashing
TEMP_PREFIX = ".tmp-"


class _HashingWriter:
    """File-like that hashes and counts everything ``torch.save`` writes through it."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.sha = hashlib.sha256()
        self.length = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.length += len(data)
        return self._stream.write(data)

    def flush(self) -> None:
        self._stream.flush()


class _OffsetReader(io.RawIOBase):
    """Read-only view of a file from ``offset`` on, so ``torch.load`` sees the payload as a whole file."""

    def __init__(self, stream: BinaryIO, offset: int):
        self._stream = stream
        self._offset = offset
        stream.seek(offset)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        return self._stream.readinto(buffer)

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos += self._offset
        return self._stream.seek(pos, whence) - self._offset

    def tell(self) -> int:
        return self._stream.tell() - self._offset


def temp_path_for(final: Path) -> Path:
    """A unique hidden sibling of ``final``; hidden names are never taken for checkpoints."""
    return final.parent / f"{TEMP_PREFIX}{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: Path, obj: Any) -> str:
    """Serialise ``obj`` with ``torch.save`` into ``path`` atomically; return the payload's sha256 (hex).

    Raises:
        OSError: the directory is not writable or the disk is full (the temp file is removed).
    """
    path = Path(path)
    tmp = temp_path_for(path)
    try:
        with open(tmp, "wb") as stream:
            stream.write(b"\0" * HEADER_SIZE)  # placeholder: the digest is known only at the end
            writer = _HashingWriter(stream)
            torch.save(obj, writer)
            digest = writer.sha.digest()
            stream.seek(0)
            stream.write(_HEADER.pack(MAGIC, VERSION, digest, writer.length))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:  # Ctrl-C mid-write: torch's zip writer then fails at close ("unexpected pos")
            raise interrupt.with_traceback(interrupt.__traceback__) from None
        raise
    fsync_dir(path.parent)
    return digest.hex()


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt that ``exc`` was raised while handling (None if there is none, or if ``exc`` is
    that interrupt itself), so a Ctrl-C during a save reads as an interrupt, not as a serialisation error."""
    seen = exc.__context__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__context__
    return None


def _read_header(stream: BinaryIO, path: Path, size: int) -> tuple[bytes, int]:
    raw = stream.read(HEADER_SIZE)
    if len(raw) < HEADER_SIZE:
        raise CorruptCheckpointError(f"{path}: truncated ({size} bytes, shorter than the {HEADER_SIZE}-byte header)")
    magic, version, digest, length = _HEADER.unpack(raw)
    if magic != MAGIC:
        raise CorruptCheckpointError(f"{path}: not an allgpu checkpoint (bad magic {magic!r})")
    if version != VERSION:
        raise CorruptCheckpointError(
            f"{path}: format version {version}, this allgpu reads version {VERSION}; upgrade allgpu"
        )
    if size != HEADER_SIZE + length:
        raise CorruptCheckpointError(
            f"{path}: truncated or extended: {size} bytes on disk, header says {HEADER_SIZE + length}"
        )
    return digest, length


def verify_file(path: Path) -> str:
    """Check length and sha256 of the payload; return the digest (hex).

    Raises:
        CorruptCheckpointError: the file is truncated, extended, bit-flipped or not an allgpu checkpoint.
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as stream:
        digest, length = _read_header(stream, path, size)
        sha = hashlib.sha256()
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            sha.update(chunk)
    if sha.digest() != digest:
        raise CorruptCheckpointError(f"{path}: sha256 mismatch (payload bit-flipped or overwritten)")
    return digest.hex()


def read_file(path: Path, map_location: Any = "cpu") -> Any:
    """Verify ``path`` and load its payload with ``torch.load(weights_only=True)``.

    Raises:
        CorruptCheckpointError: verification failed, or the payload does not unpickle.
    """
    path = Path(path)
    verify_file(path)
    with open(path, "rb") as stream:
        reader = io.BufferedReader(_OffsetReader(stream, HEADER_SIZE), buffer_size=_CHUNK)
        try:
            return torch.load(reader, map_location=map_location, weights_only=True)
        except Exception as exc:  # the digest matched, so this is a writer-side problem
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
            first_line = next((ln for ln in lines if "Unpickler error" in ln), lines[0])
            raise CorruptCheckpointError(
                f"{path}: payload does not load with weights_only=True ({first_line})"
            ) from exc


def sha256_of(path: Path) -> str:
    """sha256 (hex) of a whole file, read in 1 MiB chunks."""
    sha = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            sha.update(chunk)
    return sha.hexdigest()
