"""``allgpu migrate``: a TensorFlow ``tf.distribute`` / ``tf.keras`` script moved to allgpu + Keras 3 on PyTorch.

A LibCST codemod (concrete syntax tree: comments and formatting stay): ``migrate_source(text)`` and
``migrate_file(path, write=...)`` return a :class:`Migration` (the result, its unified diff and one note per
change, fix, kept name and name not converted, with the reason). It rewrites only what has a direct equivalent
(``names.py`` lists them) and never guesses; the result is checked with ``allgpu lint``. A notebook's code
cells are migrated as one program (``migrate_notebook``, ``notebook.py``). See docs/migrate.md.
"""

from allgpu.migrate.api import migrate_source
from allgpu.migrate.files import migrate_file, write_atomic
from allgpu.migrate.notebook import NotebookMigration, migrate_notebook
from allgpu.migrate.notes import Migration, Note

__all__ = ["Migration", "NotebookMigration", "Note", "migrate_file", "migrate_notebook", "migrate_source",
           "write_atomic"]
