"""``migrate_file``: a script or notebook on disk migrated, and written back atomically with ``--write``."""

from __future__ import annotations

import os
import tempfile
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
        MigrateInputError: the file does not exist, cannot be read as UTF-8 text, or is not valid Python (or, for
            a ``.ipynb``, not a notebook nbformat can read).
    """
    file = Path(path)
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MigrateInputError(f"{path}: cannot be read ({exc}); give the path of a Python script or notebook") \
            from None
    if file.suffix == ".ipynb":
        migration = migrate_notebook(source, str(path))
    else:
        migration = migrate_source(source, str(path))
    if write and migration.changed:
        write_atomic(file, migration.result)
    return migration


def write_atomic(file: Path, text: str) -> None:
    """Replace ``file`` with ``text`` atomically (same folder temp file, fsync, keep the mode, ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".migrate", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, file.stat().st_mode & 0o7777)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
