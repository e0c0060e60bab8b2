"""A labelled file together with its project's modules at the same commit, read from a local bare git mirror.

`allgpu lint` follows helpers and objects into the modules a file imports from its own project
(``allgpu/lint/project.py``: ``from helpers import f``, ``import engine``, ``from .utils import g``, searched in the
file's folder and its two parents; relative imports in exactly the folder the dots name). A file scored alone
loses those flows, so the author-fix cache also holds each labelled file inside a copy of its project: the
``.py`` files of its own folder and of its two parents (where the linter also looks for the project's modules
that use this one: a training script calling a data module's loader builder), and every module path its imports can resolve to (each dotted prefix, as
``name.py`` and ``name/__init__.py``, under each folder the linter searches) that exists in the repository at that
commit; then the same for those modules' own imports (``DEPTH`` levels in all), so a linter that follows one
level further still finds them. Only ``.py`` files, only what exists in ``git ls-tree`` at the commit.

Nothing here is committed: the tree is rebuilt into the cache, and a manifest records what was fetched (path
and sha256 of every file) next to it.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import warnings
from pathlib import PurePosixPath

DEPTH = 4  # as deep as the linter reads: imports, a package's re-export, the module it names, a package's submodules
LAYOUT = 3  # 2: with the files beside the folder that name SIBLING_WORD (allgpu/lint/project.py Importer.near);
# 3: also those naming a training loader (``train_loader``: a trainer looping over the loader this file builds)
SIBLING_WORD = re.compile(rb"DistributedSampler|train\w*loader", re.I)
MAX_PER_FOLDER = 64  # as allgpu/lint/project.py reads at most 64 files a folder, 64 folders
PARENTS = 2  # absolute imports: the importing file's folder and its two parents, as allgpu/lint/project.py
_IMPORT_RE = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+import\s+\(?([\w\s,]+)|import\s+([\w., ]+))", re.M)


def imports(text: str) -> list[tuple[int, str, list[str]]]:
    """``(level, module, names)`` for every import in ``text`` (a script, or a notebook's JSON); a file that
    does not parse is read line by line."""
    if text.lstrip().startswith("{"):
        try:
            cells = json.loads(text).get("cells", [])
            text = "\n".join("".join(c.get("source", [])) if isinstance(c.get("source"), list) else c.get("source", "")
                             for c in cells if c.get("cell_type") == "code")
        except (ValueError, AttributeError):
            pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _imports_by_line(text)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(0, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "", [a.name for a in node.names if a.name != "*"]))
    return out


def _imports_by_line(text: str) -> list[tuple[int, str, list[str]]]:
    out = []
    for m in _IMPORT_RE.finditer(text):
        if m.group(1) is not None:
            mod = m.group(1)
            level = len(mod) - len(mod.lstrip("."))
            names = [n.split(" as ")[0].strip() for n in m.group(2).split(",")]
            out.append((level, mod[level:], [n for n in names if n.isidentifier()]))
        else:
            out += [(0, n.split(" as ")[0].strip(), []) for n in m.group(3).split(",") if n.strip()]
    return out


def candidates(path: str, text: str) -> set[str]:
    """Repository paths (POSIX, relative to the root) that ``path``'s imports may resolve to in its project."""
    here = PurePosixPath(path).parent
    ups = [here, *here.parents]
    out: set[str] = set()
    for level, module, names in imports(text):
        dotted = [module] + [f"{module}.{n}" if module else n for n in names]
        if level:
            if level - 1 >= len(ups):
                continue
            bases = [ups[level - 1]]
        else:
            bases = ups[:PARENTS + 1]
        for d in dotted:
            parts = [p for p in d.split(".") if p]
            for i in range(1, len(parts) + 1):
                rel = "/".join(parts[:i])
                for base in bases:
                    out.add(str(base / f"{rel}.py"))
                    out.add(str(base / rel / "__init__.py"))
    return out


def git(git_dir, *args: str, data: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=data, capture_output=True, timeout=300)
    if proc.returncode:
        raise RuntimeError(f"git {' '.join(args[:2])}: {proc.stderr.decode(errors='replace').strip()[:200]}")
    return proc.stdout


def tree_paths(git_dir, commit: str) -> set[str]:
    """Every ``.py`` file in the repository at ``commit``."""
    out = git(git_dir, "ls-tree", "-r", "--name-only", "-z", commit)
    return {p for p in out.decode("utf-8", errors="replace").split("\0") if p.endswith(".py")}


def blobs(git_dir, commit: str, paths: list[str]) -> dict[str, bytes]:
    """The bytes of ``paths`` at ``commit`` (one ``git cat-file --batch``)."""
    if not paths:
        return {}
    raw = git(git_dir, "cat-file", "--batch", data="".join(f"{commit}:{p}\n" for p in paths).encode())
    out, pos = {}, 0
    for p in paths:
        nl = raw.index(b"\n", pos)
        header = raw[pos:nl].split()
        if len(header) < 3 or header[1] != b"blob":
            pos = nl + 1
            continue
        size = int(header[2])
        out[p] = raw[nl + 1:nl + 1 + size]
        pos = nl + 1 + size + 1
    return out


def project_files(git_dir, commit: str, path: str, text: bytes) -> dict[str, bytes]:
    """The project modules to put beside ``path`` (not ``path`` itself): the ``.py`` files of its folder and of
    its two parents, and what its imports resolve to, ``DEPTH`` levels deep, as ``{repository path: bytes}``."""
    present = tree_paths(git_dir, commit)
    here = PurePosixPath(path).parent
    folders = {here, *list(here.parents)[:PARENTS]}  # where the linter looks for project modules and their users
    got: dict[str, bytes] = blobs(git_dir, commit, sorted(p for p in present if PurePosixPath(p).parent in folders
                                                           and p != path))
    got.update(beside(git_dir, commit, path, present))
    frontier = {path: text}
    for _ in range(DEPTH):
        found: set[str] = set()
        for p, data in frontier.items():
            found |= candidates(p, data.decode("utf-8", errors="replace")) & present
        found.discard(path)
        got.update(blobs(git_dir, commit, sorted(found - got.keys())))
        frontier = {p: got[p] for p in found if p in got}
    return got


def beside(git_dir, commit: str, path: str, present: set[str]) -> dict[str, bytes]:
    """The ``.py`` files of the folders beside ``path``'s folder (the other subfolders of its parent: ``libs/egs``
    for ``libs/training/trainer.py``) whose text names ``SIBLING_WORD``: where ``Importer.near`` looks for the
    module that builds a trainer's loader, and the trainer looping over a loader that a data module here builds
    (PT004 both ways). Bounded as the linter: 64 folders, 64 files each, sorted by name."""
    here = PurePosixPath(path).parent
    if here == PurePosixPath("."):
        return {}
    by_folder: dict[PurePosixPath, list[str]] = {}
    for p in present:
        folder = PurePosixPath(p).parent
        if folder.parent == here.parent and folder != here and folder != here.parent and not folder.name.startswith("."):
            by_folder.setdefault(folder, []).append(p)
    wanted = [p for f in sorted(by_folder)[:MAX_PER_FOLDER] for p in sorted(by_folder[f])[:MAX_PER_FOLDER]]
    return {p: b for p, b in blobs(git_dir, commit, wanted).items() if SIBLING_WORD.search(b)}
