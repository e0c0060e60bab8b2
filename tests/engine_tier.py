"""Shared by the engine tier (``pytest -m engines``): skip-or-fail when an engine is missing, and the docs'
code blocks, which are the exact text these tests run."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "engines"


def require(ok: bool, reason: str) -> None:
    """Skip the test with ``reason`` when ``ok`` is false; in CI (``CI=true``) fail instead: the tier must run."""
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"engine tier cannot run in CI: {reason}", pytrace=False)
    print(f"\nSKIP engine tier: {reason}", file=sys.stderr)
    pytest.skip(reason)


def doc_blocks(page: str, language: str) -> list[str]:
    """The fenced ``language`` code blocks of ``docs/engines/<page>``, in order."""
    text = (DOCS / page).read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def job_env(**extra: str) -> dict[str, str]:
    """The environment a job runs in: this venv's python first on PATH, this checkout importable, no GPU, one
    thread a replica (the machine has 2 cores)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}".rstrip(":"), "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1", **extra}
