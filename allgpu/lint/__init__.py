"""``allgpu lint``: a static checker for the multi-GPU pitfalls of TensorFlow/Keras and PyTorch scripts.

It parses with :mod:`ast` only; it never imports or runs the code it checks and needs neither TensorFlow,
PyTorch nor a GPU. ``check_source(text, filename) -> list[Finding]`` is the Python API.
"""

from allgpu.lint.catalog import RULES, explain
from allgpu.lint.checker import LintUsageError, check_path, check_paths, check_source
from allgpu.lint.findings import Finding, Rule

__all__ = ["RULES", "Finding", "LintUsageError", "Rule", "check_path", "check_paths", "check_source", "explain"]
