"""Shared helper for the lint tests: the rule ids check_source reports for a dedented snippet.

Every rule runs, the ones off by default too (catalog.DEFAULT_OFF): these tests check each rule's logic.
"""

import textwrap

from allgpu.lint import RULES, check_source

ALL_RULES = list(RULES)


def ids(src: str, filename: str = "train.py") -> set[str]:
    return {f.rule_id for f in check_source(textwrap.dedent(src), filename, select=ALL_RULES)}
