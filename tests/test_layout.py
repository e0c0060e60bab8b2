"""The package's shape, checked: layers import only downwards, no import cycle, no file over 400 lines and no
function over 60 (docstrings aside). See docs/architecture.md for the picture and the reasons."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "allgpu"

# Each top-level room's layer: a module may import from its own layer and lower ones only (and no cycle, checked
# below). ``allgpu`` itself (the lazy package root, for ``allgpu.__version__``) may be imported from anywhere.
LAYERS = {
    "errors": 0, "findings": 0, "devices": 0,  # the base: at most three loose modules, the rest packages
    "runtime": 1,
    "core": 2,
    "keras": 2,  # the Keras 3 adapter: uses the core only (imports Keras lazily); scope() and mirror() call it
    "strategies": 3,
    "checkpoint": 4,
    "lint": 5, "monitor": 5,  # diagnosis beside the core: import only down
    "doctor": 6,  # may use the monitor's report and the linter for `doctor --run`
    "train": 7,
    "migrate": 8,  # the tf.distribute -> allgpu codemod: uses the linter on its output
    "bench": 9,
    "cli": 10,
}
BASE_MODULES = {"errors", "findings"}  # the only loose modules at the top of allgpu/ (besides __init__)
LINES_PER_FILE = 400
LINES_PER_FUNCTION = 60


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges[module] |= {resolve(a.name) for a in node.names if a.name.startswith("allgpu")}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("allgpu"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    edges[module].add(full if full in modules else resolve(node.module))
    return edges


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "allgpu"


def test_every_room_has_a_layer():
    rooms = {_room(m) for m in _modules()} - {"allgpu"}
    assert not rooms - set(LAYERS), f"give these rooms a layer in tests/test_layout.py: {sorted(rooms - set(LAYERS))}"


def test_layers_import_only_downwards():
    wrong = []
    for module, targets in _imports(_modules()).items():
        if module.endswith("__main__"):
            continue  # `python -m allgpu.X` entry points sit on top of everything
        for target in targets:
            a, b = _room(module), _room(target)
            if a != b and b != "allgpu" and LAYERS.get(b, 99) > LAYERS.get(a, 99):
                wrong.append(f"{module} imports {target} ({a} is layer {LAYERS.get(a)}, {b} is {LAYERS.get(b)})")
    assert not wrong, "imports from a layer up or across:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    edges = _imports(_modules())
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if nxt == node or nxt == "allgpu":
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [node, nxt]) if nxt in stack else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_files_and_functions_stay_small():
    too_big = []
    for module, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > LINES_PER_FILE:
            too_big.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    length -= body[0].end_lineno - body[0].lineno + 1
                if length > LINES_PER_FUNCTION:
                    too_big.append(f"{module}.{node.name}: {length} lines")
    assert not too_big, "over budget:\n" + "\n".join(too_big)


def test_user_mistakes_raise_typed_errors():
    """Every error allgpu raises on purpose has an allgpu type (``allgpu.errors``), each also the built-in a user
    would catch; a bare ``raise ValueError(...)`` would give a user nothing to catch by allgpu's name."""
    import re

    bare = re.compile(r"raise (ValueError|TypeError|KeyError|FileNotFoundError|OSError)\(")
    found = [f"{path.relative_to(PACKAGE.parent)}:{n}" for path in PACKAGE.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if bare.search(line)]
    assert not found, "bare built-in errors raised (use a type from allgpu.errors):\n" + "\n".join(found)


def test_every_top_level_entry_is_a_layer_package_or_a_base_module():
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} - BASE_MODULES
    assert not loose, f"move these into the package of their layer: {sorted(loose)}"
    assert len(BASE_MODULES) <= 3
