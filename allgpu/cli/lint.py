"""``allgpu lint PATH...``: static check of training scripts and notebooks for multi-GPU pitfalls.

Exit code: 0 no findings (or ``--exit-zero``), 1 findings, 2 usage error (unknown rule, missing path, no path).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from allgpu.errors import UnknownRuleError
from allgpu.findings import exit_code
from allgpu.lint.catalog import DEFAULT_OFF, RULES, explain
from allgpu.lint.checker import LintUsageError, check_paths, parse_rule_list
from allgpu.lint.output import FORMATS, format_statistics


@dataclass(frozen=True)
class LintConfig:
    paths: tuple[str, ...]
    fmt: str
    select: tuple[str, ...] | None
    ignore: tuple[str, ...] | None
    explain: str | None
    list_rules: bool
    statistics: bool = False
    exit_zero: bool = False


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "lint", help="find multi-GPU pitfalls in TensorFlow/Keras and PyTorch scripts (static, no imports)",
        description="Statically check .py files and .ipynb notebooks for the pitfalls that leave GPUs idle. "
                    "Suppress one line with `# allgpu: noqa` or `# allgpu: noqa[ID]`.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (searched recursively)")
    p.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default: text)")
    p.add_argument("--select", help="only these rule ids or prefixes, comma-separated (e.g. TF001,PT)")
    p.add_argument("--ignore", help="skip these rule ids or prefixes, comma-separated")
    p.add_argument("--explain", metavar="ID", help="print the explanation and fix for rule ID, then exit")
    p.add_argument("--list-rules", action="store_true", help="list every rule and exit")
    p.add_argument("--statistics", action="store_true",
                   help="print the number of findings per rule instead of the findings")
    p.add_argument("--exit-zero", action="store_true",
                   help="exit with code 0 even when there are findings (usage errors still exit 2)")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        cfg = LintConfig(tuple(args.paths), args.format, parse_rule_list(args.select), parse_rule_list(args.ignore),
                         args.explain, args.list_rules, args.statistics, args.exit_zero)
    except LintUsageError as exc:
        print(f"allgpu lint: error: {exc}", file=sys.stderr)
        return 2
    if cfg.explain:
        try:
            sys.stdout.write(explain(cfg.explain))
        except UnknownRuleError as exc:
            print(f"allgpu lint: error: {exc}", file=sys.stderr)
            return 2
        return 0
    if cfg.list_rules:
        for r in RULES.values():
            off = "  (off by default: --select it)" if r.id in DEFAULT_OFF else ""
            print(f"{r.id}  {r.severity:<7}  {r.message}{off}")
        return 0
    if not cfg.paths:
        print("allgpu lint: error: no PATH given; usage: allgpu lint PATH... (or --explain ID)", file=sys.stderr)
        return 2
    try:
        findings, n_files = check_paths(cfg.paths, cfg.select, cfg.ignore)
    except LintUsageError as exc:
        print(f"allgpu lint: error: {exc}", file=sys.stderr)
        return 2
    if not n_files:  # a mistyped folder must not pass a CI step in silence
        print(f"allgpu lint: warning: no .py or .ipynb file under {', '.join(map(repr, cfg.paths))}: nothing was "
              "checked", file=sys.stderr)
    if cfg.statistics:
        sys.stdout.write(format_statistics(findings, n_files, cfg.fmt))
    else:
        sys.stdout.write(FORMATS[cfg.fmt](findings, n_files))
    return 0 if cfg.exit_zero else exit_code(findings, fail_on="info")  # any finding fails the run, info too
