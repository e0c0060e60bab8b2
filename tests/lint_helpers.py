"""Shared helper for the lint tests: the rule ids check_source reports for a dedented snippet."""

import textwrap

from allgpu.lint import check_source


def ids(src: str, filename: str = "train.py") -> set[str]:
    return {f.rule_id for f in check_source(textwrap.dedent(src), filename)}
