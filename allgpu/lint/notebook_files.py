"""Python scripts a notebook writes with ``%%writefile train.py`` (Colab/Kaggle DDP notebooks then run them
with ``!torchrun train.py``). The notebook reader skips such cells; the checker checks each one as its own file
and reports its findings in that cell (line 1 is the ``%%writefile`` line, so script line N is cell line N+1).
"""

from __future__ import annotations

import json
import shlex


def writefile_scripts(raw: str) -> list[tuple[int, str, str]]:
    """``(cell, file name, script text)`` for each ``%%writefile NAME.py`` code cell of the notebook JSON ``raw``.

    ``cell`` is 1-based among all cells (markdown counted), as :mod:`allgpu.lint.notebook` numbers them. Notebook
    JSON that cannot be read gives ``[]`` (the notebook reader reports it).
    """
    try:
        cells = json.loads(raw).get("cells")
    except (ValueError, AttributeError):
        return []
    out = []
    for number, cell in enumerate(cells if isinstance(cells, list) else [], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source or "")
        first, _, body = text.partition("\n")
        words = first.strip().split(None, 1)
        if not words or words[0] != "%%writefile" or len(words) < 2:
            continue
        try:
            args = shlex.split(words[1])
        except ValueError:
            continue
        if "-a" in args or "--append" in args:
            continue  # a fragment appended to a file written elsewhere: not a script on its own
        if args and args[-1].endswith(".py"):
            out.append((number, args[-1], body))
    return out
