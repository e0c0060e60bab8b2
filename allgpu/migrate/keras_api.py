"""Whether a ``keras.X.Y`` name exists in the installed Keras 3, read from its files without importing it.

Keras 3's public API is generated ``__init__.py`` files of ``from keras.src... import Name as Name`` lines, one
package per public module (``keras/losses/__init__.py``). Reading them needs neither a backend nor TensorFlow, so
``allgpu migrate`` stays fast; a ``tf.keras`` name that Keras 3 dropped (``losses.Reduction``,
``preprocessing.image.ImageDataGenerator``) is then reported instead of rewritten into a name that fails.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _root() -> Path | None:
    try:
        spec = importlib.util.find_spec("keras")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    return root if (root / "__init__.py").is_file() else None


@functools.lru_cache(maxsize=256)
def _names(package: Path) -> frozenset[str]:
    """The public names a generated API ``__init__.py`` binds (``from ... import X as Y`` -> ``Y``)."""
    try:
        tree = ast.parse((package / "__init__.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(found)


def exists(name: str) -> bool | None:
    """``True``/``False`` for ``keras.a.b.C`` in the installed Keras; None when Keras is not installed or its
    layout is not Keras 3's (nothing can be said). Attributes past the first non-module name are not checked."""
    root = _root()
    if root is None or not name.startswith("keras."):
        return None
    package = root
    for part in name.split(".")[1:]:
        if (package / part / "__init__.py").is_file():
            package = package / part
            continue
        return part in _names(package)
    return True
