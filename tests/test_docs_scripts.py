"""Every code block in the README and the docs that is a full script runs, as a user would run it.

A ```python block is a full script when it compiles and pyflakes finds no undefined name in it (a fragment such as
``with strategy.scope(): model = Net()`` refers to names defined elsewhere, and is left out). Each full script runs
as ``python script.py`` in a temporary folder, with a time limit, and must exit 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _blocks():
    for page in PAGES:
        for number, match in enumerate(re.finditer(r"```python\n(.*?)```", page.read_text(), re.S), 1):
            yield page.relative_to(REPO), number, match.group(1)


def _is_full_script(source: str) -> bool:
    from pyflakes.api import check
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self):
            self.undefined = 0

        def unexpectedError(self, filename, message):
            self.undefined += 1

        def syntaxError(self, *args):
            self.undefined += 1

        def flake(self, message):
            self.undefined += type(message).__name__ in ("UndefinedName", "UndefinedExport", "UndefinedLocal")

    reporter = Collect()
    check(source, "block.py", reporter)
    return reporter.undefined == 0


FULL = [(str(page), number, source) for page, number, source in _blocks() if _is_full_script(source)]


@pytest.mark.unit
def test_the_readme_examples_are_full_scripts():
    assert sum(page == "README.md" for page, _, _ in FULL) >= 2, "the README's two examples must be runnable as they are"


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("page, number, source", FULL, ids=[f"{p}#{n}" for p, n, _ in FULL])
def test_a_full_script_in_the_docs_runs(tmp_path, page, number, source):
    script = tmp_path / "script.py"
    script.write_text(source)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, f"{page}, python block {number}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
