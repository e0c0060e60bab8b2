"""Helpers in other modules of the checked project: ``from helpers import build_model``, ``from .utils import
setup``, ``import engine``, resolved to the sibling files of the checked file (never imported, only parsed).

Bounded: one level (a helper's own imports are not followed), candidates searched in the file's folder and
its two parents (relative imports: exactly the folder the dots name), files over 1 MB skipped. Parsed helpers
are cached by path, size and modification time, so a folder of scripts sharing ``utils.py`` parses it once.

The other way round, :meth:`Importer.users` finds the project's modules that may use this one (a training script
calling a data module's loader builder): the ``.py`` files of the same folders (at most 64 a folder) whose text
names one of the given functions, parsed; :meth:`Importer.near` adds the folders beside this file's (a data module
in ``libs/egs/`` building the loader that ``libs/training/trainer.py`` iterates).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

_CACHE: dict[tuple[str, int, int], object] = {}
# Import roots that are libraries, never the project's own files (saves the file-system probes).
LIBRARIES = frozenset({"tensorflow", "keras", "torch", "torchvision", "numpy", "os", "sys", "allgpu", "jax",
                        "horovod", "transformers", "tf_keras", "tensorflow_datasets", "absl", "time", "json",
                        "math", "random", "argparse", "logging", "functools", "collections", "pathlib"})
_MAX_BYTES = 1 << 20
_PARENTS = 2
_MAX_USERS_PER_FOLDER = 64


class Importer:
    """Loads the modules a file imports from its own project, as :class:`~allgpu.lint.resolve.Module` objects."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        self.dir = self.path.parent
        self._memo: dict[str, object] = {}

    def load(self, dotted: str):
        """The Module for ``"helpers"``, ``"pkg.utils"`` or ``".utils"`` (relative), or None if not in the project."""
        if dotted not in self._memo:
            root = dotted.split(".")[0]
            self._memo[dotted] = None if root in LIBRARIES else self._find(dotted)
        return self._memo[dotted]

    def users(self, names: set[str]) -> list:
        """Modules of the ``.py`` files in this file's folder and its two parents (not this file) whose text
        contains one of ``names`` (a cheap filter before parsing); each with ``.path`` set."""
        out = []
        for base in [self.dir, *list(self.dir.parents)[:_PARENTS]]:
            try:
                files = sorted(p for p in base.glob("*.py") if p.is_file())[:_MAX_USERS_PER_FOLDER]
            except OSError:
                continue
            out += self._parsed_if(files, lambda text: any(n in text for n in names))
        return out

    def near(self, names: set[str]) -> list:
        """Like :meth:`users`, and also the ``.py`` files of the folders beside this file's folder (the other
        packages of its parent: ``libs/egs/`` for ``libs/training/trainer.py``), whose text contains every one of
        ``names`` (a data module building the loader that a trainer here iterates)."""
        out = [m for m in self.users(names) if all(n in m.source for n in names)]
        try:
            folders = sorted(p for p in self.dir.parent.iterdir() if p.is_dir() and p != self.dir
                             and not p.name.startswith("."))
        except OSError:
            return out
        taken = 0
        for folder in folders:
            files = sorted(folder.glob("*.py"))
            taken += bool(files)  # the first 64 folders that hold modules
            if taken > _MAX_USERS_PER_FOLDER:
                break
            out += self._parsed_if(files[:_MAX_USERS_PER_FOLDER], lambda text: all(n in text for n in names))
        return out

    def _parsed_if(self, files: list[Path], wanted) -> list:
        """The parsed modules of ``files`` (not this file, none over 1 MB) whose text ``wanted(text)`` accepts."""
        out = []
        for p in files:
            try:
                if not p.is_file() or p.resolve() == self.path or p.stat().st_size > _MAX_BYTES:
                    continue
                text = p.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if wanted(text):
                fm = _parse(p)
                if fm is not None:
                    out.append(fm)
        return out

    def find_def(self, module: str, name: str):
        """``(module, ClassDef or FunctionDef)`` named ``name`` in the project module ``module`` as this file
        imports it, following one re-export (``from .simclr import SimCLR`` in a package's ``__init__``), or None."""
        importer = self
        for _ in range(2):
            fm = importer.load(module)
            if fm is None:
                return None
            defs = fm.classes.get(name) or fm.functions.get(name)
            if defs:
                return fm, defs[-1]
            target = fm.aliases.get(name)
            if not target or getattr(fm, "path", None) is None:
                return None
            importer, (module, _, name) = Importer(fm.path), target.rpartition(".")
        return None

    def locate(self, dotted: str) -> Path | None:
        """The file of the project module ``dotted`` as this file imports it (not parsed), or None."""
        if dotted.split(".")[0] in LIBRARIES:
            return None
        level = len(dotted) - len(dotted.lstrip("."))
        name = dotted[level:]
        if level:
            ups = list(self.path.parents)
            bases = [ups[level - 1]] if level - 1 < len(ups) else []
        else:
            bases = [self.dir, *list(self.dir.parents)[:_PARENTS]]
        rel = name.replace(".", "/") if name else ""
        for base in bases:
            for cand in ((base / f"{rel}.py") if rel else None, base / rel / "__init__.py"):
                if cand is not None and cand.is_file() and cand.resolve() != self.path:
                    return cand
        return None

    def _find(self, dotted: str):
        path = self.locate(dotted)
        return _parse(path) if path is not None else None


def find_def(path: Path, module: str, name: str):
    """``Importer(path).find_def(module, name)``."""
    return Importer(path).find_def(module, name)


def _parse(path: Path):
    from allgpu.lint.resolve import Module  # resolve imports this module's Importer only by duck typing

    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path.resolve()), st.st_size, int(st.st_mtime_ns))
    if key in _CACHE:
        return _CACHE[key]
    mod = None
    if st.st_size <= _MAX_BYTES:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = Module(ast.parse(text, filename=str(path)), text)
                mod.path = path  # for messages: "built in helpers.py"
        except (SyntaxError, ValueError, RecursionError, MemoryError, OSError):
            mod = None
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[key] = mod
    return mod
