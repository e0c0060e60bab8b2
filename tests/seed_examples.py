"""The seed documents' code examples, read at test time (their text is never committed), and the small documented
substitutions that let the migrated examples train quickly on a CPU without downloads (see tests/test_seeds.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def seeds_dir() -> Path:
    """``../shared/seeds`` from the repository root; from a git worktree, from the main checkout's root."""
    here = ROOT.parent / "shared" / "seeds"
    dotgit = ROOT / ".git"
    if not here.is_dir() and dotgit.is_file():  # a worktree: ".git" says "gitdir: MAIN/.git/worktrees/NAME"
        gitdir = Path(dotgit.read_text().split("gitdir:", 1)[-1].strip())
        return gitdir.parent.parent.parent.parent / "shared" / "seeds"
    return here


@dataclass(frozen=True)
class Example:
    seed: str      # "000"
    number: int    # 1-based, in the document's order
    source: str

    @property
    def name(self) -> str:
        return f"{self.seed}.{self.number}"


def examples(folder: Path | None = None) -> list[Example]:
    """Every ```python block of every seed document, in order."""
    out = []
    for path in sorted((folder or seeds_dir()).glob("*.txt")):
        blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
        out += [Example(path.name[:3], i, text) for i, text in enumerate(blocks, 1)]
    return out


def first_model_expression(source: str) -> str | None:
    """The source of the first ``keras.Sequential([...])`` call in ``source`` (a migrated Example 1)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "keras.Sequential" and node.args \
                and not isinstance(node.args[0], ast.Constant):
            return ast.get_source_segment(source, node)
    return None


# The substitutions, applied to the *migrated* text (each documented in tests/test_seeds.py and docs/migrate.md):
# MNIST -> digits in MNIST's shapes (no download; MNIST's sizes in reshape become -1), fewer epochs for speed.
SUBSTITUTIONS = [
    (re.compile(r"keras\.datasets\.mnist\.load_data\(\)"), "seed_digits.load_data()"),
    (re.compile(r"\.reshape\((?:60000|10000), 784\)"), ".reshape(-1, 784)"),
    (re.compile(r"epochs=10\b"), "epochs=2"),
    (re.compile(r"range\(10\)"), "range(2)"),
]


def prepare(migrated: str, example_one: str | None) -> str:
    """The migrated example as the test runs it: digits for MNIST, fewer epochs, and an elided model
    (``keras.Sequential(...)``, "Define model as in Example 1") replaced by its document's Example 1 model."""
    text = migrated
    for pattern, replacement in SUBSTITUTIONS:
        text = pattern.sub(replacement, text)
    if "keras.Sequential(...)" in text and example_one:
        model = first_model_expression(example_one)
        if model:
            text = text.replace("keras.Sequential(...)", model)
    return text
