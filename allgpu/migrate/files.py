"""``migrate_file``: a script or notebook on disk migrated, and written back atomically with ``--write``."""

from __future__ import annotations

import io
import os
import tempfile
import tokenize
from pathlib import Path

from allgpu.errors import MigrateInputError
from allgpu.migrate.api import migrate_source
from allgpu.migrate.notebook import migrate_notebook


def migrate_file(path: str | os.PathLike, *, write: bool = False):
    """Migrate the script at ``path``; with ``write=True`` replace it atomically with the result.

    A ``.ipynb`` path is a notebook (:func:`allgpu.migrate.notebook.migrate_notebook`): a
    :class:`~allgpu.migrate.notebook.NotebookMigration` is returned, with the same ``diff()``, ``report()``,
    ``changed`` and ``complete``.

    The new text is written to a temporary file in the same folder, flushed to disk, given the original's
    permissions and renamed over it (``os.replace``): an interrupted write leaves the original whole.

    Raises:
        MigrateInputError: the file does not exist, cannot be read as UTF-8 text (or the encoding its coding line
            declares), or is not valid Python (or, for a ``.ipynb``, not a notebook nbformat can read); with
            ``write=True`` also a read-only file, a file changed on disk since it was read, or a failed write (the
            original is then unchanged). A symlink is written through: its target changes, the link stays.
    """
    file = Path(path)
    raw, encoding = _read(file, path)
    source = raw.decode(encoding)
    if file.suffix == ".ipynb":
        migration = migrate_notebook(source, str(path))
    else:
        migration = migrate_source(source, str(path))
    if write and migration.changed:
        _write_back(file, path, raw, migration.result, encoding)
    return migration


def _read(file: Path, path) -> tuple[bytes, str]:
    """The file's bytes and their encoding (UTF-8, or a script's PEP 263 ``# -*- coding: ... -*-`` line)."""
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise MigrateInputError(f"{path}: no such file; give the path of a Python script or notebook") from None
    except OSError as exc:
        raise MigrateInputError(f"{path}: cannot be read ({exc.strerror or exc}); nothing migrated") from None
    encoding = "utf-8"
    try:
        if file.suffix != ".ipynb":
            encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise MigrateInputError(f"{path}: its bytes are not {encoding} text ({exc}); nothing migrated. Fix: save it "
                                "as UTF-8, or declare its encoding on line 1 or 2 (`# -*- coding: latin-1 -*-`)") \
            from None
    return raw, encoding


def _write_back(file: Path, path, before: bytes, text: str, encoding: str) -> None:
    """Write ``text`` over the file read as ``before``: through a symlink to its target (the link stays), refused
    when the file is read-only or changed since it was read; a failed write leaves the original whole."""
    target = file.resolve()
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise MigrateInputError(f"{path}: the migrated text cannot be written as {encoding} ({exc}); nothing "
                                "written. Fix: save the file as UTF-8 first") from None
    try:
        if not target.stat().st_mode & 0o222:
            raise MigrateInputError(f"{path}: read-only; nothing written. Fix: `chmod u+w {path}`, or run without "
                                    "--write to see the diff")
        if target.read_bytes() != before:
            raise MigrateInputError(f"{path}: changed on disk while it was being migrated; nothing written. Fix: "
                                    "run `allgpu migrate --write` again once nothing else edits it")
        write_atomic(target, data)
    except OSError as exc:
        raise MigrateInputError(f"{path}: cannot be written ({exc.strerror or exc}); the original is unchanged. "
                                "Fix: make its folder writable, or run without --write and apply the diff") \
            from None


def write_atomic(file: Path, text: str | bytes) -> None:
    """Replace ``file`` with ``text`` (UTF-8) or bytes atomically (same folder temp file, fsync, keep the mode, ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".migrate", dir=file.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8") if isinstance(text, str) else text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, file.stat().st_mode & 0o7777)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
