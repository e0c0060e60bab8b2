"""Run every rule on one source text or on files and folders; apply ``--select``/``--ignore`` and noqa comments."""

from __future__ import annotations

import ast
import gc
import io
import os
import re
import tokenize
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Iterator

from allgpu.errors import LintUsageError
from allgpu.lint import rules_accumulate, rules_allgpu, rules_env, rules_sharded, rules_tf, rules_tf_device, rules_tf_input, rules_torch
from allgpu.lint.catalog import DEFAULT_OFF, RULES
from allgpu.lint.compile_check import compile_errors
from allgpu.lint.facts import Facts
from allgpu.lint.findings import Finding, lint_finding
from allgpu.lint.partial import parseable_prefix, unchecked_note
from allgpu.lint.notebook import NotebookError, read_notebook, source_lines_in_file
from allgpu.lint.project import Importer
from allgpu.lint.notebook_files import writefile_scripts
from allgpu.lint.resolve import Module

CHECKS = (
    rules_tf.check_tf001, rules_tf_device.check_tf002, rules_tf_device.check_tf003_visible, rules_env.check_visible_devices,
    rules_tf.check_tf004, rules_tf.check_tf005, rules_tf.check_tf006, rules_tf_input.check_tf007,
    rules_tf_input.check_tf008, rules_tf_input.check_tf009, rules_tf.check_tf010, rules_tf.check_tf011,
    rules_tf_input.check_tf012,
    rules_torch.check_pt001, rules_torch.check_pt002, rules_torch.check_pt003, rules_torch.check_pt004,
    rules_torch.check_pt005, rules_torch.check_pt006, rules_torch.check_pt007, rules_torch.check_pt008,
    rules_torch.check_pt009, rules_torch.check_pt011, rules_sharded.check_pt012,
    rules_allgpu.check_ag001,
    rules_allgpu.check_ag002,
    rules_allgpu.check_ag003,
    rules_allgpu.check_ag004,
    rules_accumulate.check_ag005,
)
_NOQA = re.compile(r"#\s*allgpu:\s*noqa(?:\[([^\]]*)\])?", re.IGNORECASE)
_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "__pycache__", ".ipynb_checkpoints", "node_modules", ".tox",
              "site-packages", ".mypy_cache", ".pytest_cache"}


def parse_rule_list(text: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """``"TF001,PT"`` -> ``("TF001", "PT")``; every entry must be a rule id or the prefix of one.

    Raises:
        LintUsageError: an entry matches no rule (the message lists the known ids).
    """
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    out = tuple(i.strip().upper() for i in items if i.strip())
    for item in out:
        if not any(rid.startswith(item) for rid in RULES):
            raise LintUsageError(f"unknown rule {item!r} in --select/--ignore; expected one of "
                                 f"{', '.join(RULES)} or a prefix such as TF, PT, AG")
    return out


def _enabled(rule_id: str, select, ignore) -> bool:
    if select is None and rule_id in DEFAULT_OFF:
        return False
    if select is not None and not any(rule_id.startswith(s) for s in select):
        return False
    return not (ignore and any(rule_id.startswith(i) for i in ignore))


@dataclass
class _Context:
    """What a rule sees: the module, shared facts, and ``emit``."""

    mod: Module
    facts: Facts
    emitted: list[tuple[str, int, int, str]] = field(default_factory=list)

    @cached_property
    def torch(self) -> rules_torch.TorchFacts:
        return rules_torch.TorchFacts(self.mod)

    def emit(self, rule_id: str, node: ast.AST, message: str | None = None) -> None:
        if self.mod.is_foreign(node):  # inside another module of the project: not this file's line
            return
        self.emitted.append((rule_id, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1,
                             message or RULES[rule_id].message))


def _suppressed(line_text: str, rule_id: str) -> bool:
    m = _NOQA.search(line_text)
    if m is None:
        return False
    if m.group(1) is None:
        return True
    ids = {i.strip().upper() for i in m.group(1).split(",")}
    return rule_id in ids


def check_source(text: str, filename: str = "<string>", select=None, ignore=None, importer=None) -> list[Finding]:
    """Check one script (or the JSON text of a notebook when ``filename`` ends in ``.ipynb``).

    Args:
        text: the file's content; it is parsed, never imported or run.
        filename: used in the findings and to recognise notebooks.
        select / ignore: rule ids or prefixes (``"TF"``, ``["PT002"]``); ``None`` selects every rule on by default.
        importer: resolves imports of the project's other modules (``allgpu.lint.project.Importer``);
            :func:`check_path` sets one, so helpers in sibling files are followed.

    Returns:
        Findings sorted by position; a file that does not parse gives one ``E999`` finding at its line.

    Raises:
        LintUsageError: ``select``/``ignore`` name no known rule.
    """
    select, ignore = parse_rule_list(select), parse_rule_list(ignore)
    # A large syntax tree is millions of young objects without cycles: pausing the cycle collector while
    # building and reading it saves about a third of the time (reference counting still frees everything).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with warnings.catch_warnings():  # the parser's warnings about the user's code are not ours to print
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return _check_source(text, filename, select, ignore, importer)
    finally:
        if was_enabled:
            gc.enable()


def _check_source(text: str, filename: str, select, ignore, importer=None) -> list[Finding]:
    findings: list[Finding] = []
    origin, starts = None, {}
    if filename.endswith(".ipynb"):
        try:
            nb = read_notebook(text)
        except NotebookError as exc:
            return _keep([lint_finding(filename, 1, 1, "E999", "error", str(exc))], select, ignore)
        starts = source_lines_in_file(text)
        findings += [lint_finding(filename, line, 1, "E999", "error", f"cell does not parse: {msg}", cell=cell,
                                  file_line=starts[cell] + line - 1 if cell in starts else None)
                     for cell, line, msg in nb.bad_cells]
        findings += _writefile_findings(text, filename, starts, select, ignore)
        text, origin = nb.text, nb.origin
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        hint = " (Python 2 code?)" if _looks_py2(exc, text) else ""
        line = exc.lineno or 1
        part = parseable_prefix(text, line) if origin is None else None
        note = unchecked_note(line, part[2] if part else None, len(text.splitlines()))
        findings.append(lint_finding(filename, line, (exc.offset or 0) or 1, "E999", "error",
                                     with_fix(f"file does not parse: {exc.msg}{hint}{note}", RULES["E999"]),
                                     fix=RULES["E999"].fix))
        if part is None:
            return _keep(findings, select, ignore)
        tree, text = part[0], part[1]
    except (ValueError, RecursionError, MemoryError) as exc:
        findings.append(lint_finding(filename, 1, 1, "E999", "error", f"file does not parse: {exc}"))
        return _keep(findings, select, ignore)
    mod = Module(tree, text, importer)
    refused = compile_errors(mod, notebook=origin is not None)
    if refused:  # Python would not run this file: report it like a syntax error, and check the code anyway
        line, col, msg = refused[0]
        findings.append(_located(filename, line, col, "E999", f"file does not compile: {msg}; the rest of the "
                                 "file was checked", origin, starts))
    ctx = _Context(mod, Facts(mod))
    for check in CHECKS:
        try:
            check(ctx)
        except RecursionError:  # absurdly deep nesting: skip this rule, keep the others
            continue
    lines = ctx.mod.lines
    seen = set()
    for rule_id, line, col, message in ctx.emitted:
        if (rule_id, line, col) in seen:
            continue
        seen.add((rule_id, line, col))
        if 0 < line <= len(lines) and _suppressed(lines[line - 1], rule_id):
            continue
        findings.append(_located(filename, line, col, rule_id, message, origin, starts))
    return _keep(findings, select, ignore)


_CALLED_AT = re.compile(r"called at line (\d+)")


def _cell_ref(line: int, origin) -> str:
    if 0 < line <= len(origin):
        cell, cell_line = origin[line - 1]
        return f"called at cell {cell}, line {cell_line}"
    return f"called at line {line}"


def _located(filename: str, line: int, col: int, rule_id: str, message: str, origin, starts) -> Finding:
    """A finding at ``line`` of the checked text, mapped back to its notebook cell when there is one."""
    rule = RULES[rule_id]
    if origin is not None:  # "called at line N" of the joined cells -> the cell and the line in it
        message = _CALLED_AT.sub(lambda m: _cell_ref(int(m.group(1)), origin), message)
    message = with_fix(message, rule)
    if origin is not None and 0 < line <= len(origin):
        cell, cell_line = origin[line - 1]
        file_line = starts[cell] + cell_line - 1 if cell in starts else None
        return lint_finding(filename, cell_line, col, rule_id, rule.severity, message, cell=cell,
                            file_line=file_line, fix=rule.fix)
    return lint_finding(filename, line, col, rule_id, rule.severity, message, fix=rule.fix)


def with_fix(message: str, rule) -> str:
    """``message`` ending with the rule's one-line fix (``...; Fix: ...``), unless it already gives one."""
    if not rule.fix or "Fix:" in message:
        return message
    return f"{message.rstrip('. ')}. Fix: {rule.fix}"


def _writefile_findings(raw: str, filename: str, starts: dict[int, int], select, ignore) -> list[Finding]:
    """Check each ``%%writefile x.py`` cell as its own script; its line N is line N+1 of the cell."""
    out = []
    for cell, name, body in writefile_scripts(raw):
        for f in _check_source(body, name, select, ignore):
            line = f.line + 1
            out.append(lint_finding(filename, line, f.col, f.rule_id, f.severity, f"{f.message} (in {name})", cell=cell,
                               file_line=starts[cell] + line - 1 if cell in starts else None))
    return out


def _keep(findings: list[Finding], select, ignore) -> list[Finding]:
    return sorted((f for f in findings if _enabled(f.rule_id, select, ignore)),
                  key=lambda f: (f.cell or 0, f.line, f.col, f.rule_id, f.message))


def _looks_py2(exc: SyntaxError, text: str) -> bool:
    return "print" in (exc.text or "") or "Missing parentheses" in (exc.msg or "") or "except " in (exc.text or "")


def read_text(path: Path) -> str:
    """The file decoded by its PEP 263 coding cookie (UTF-8 by default).

    Raises:
        UnicodeDecodeError / SyntaxError: the bytes do not decode (reported as E999 by :func:`check_path`).
    """
    raw = path.read_bytes()
    if path.suffix == ".ipynb":
        return raw.decode("utf-8")
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return raw.decode(encoding)


_UNREADABLE_FIX = ("save the file as UTF-8, or declare its encoding on line 1 or 2 "
                   "(`# -*- coding: latin-1 -*-`)")


def check_path(path: Path, select=None, ignore=None) -> list[Finding]:
    """Check one file; an unreadable or undecodable file is an ``E999`` finding, not an exception."""
    name = str(path)
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as exc:
        fix = _UNREADABLE_FIX if isinstance(exc, (UnicodeDecodeError, SyntaxError, LookupError)) else \
            "make the file readable (permissions) or leave it out of the paths"
        return _keep([lint_finding(name, 1, 1, "E999", "error", f"cannot read file: {exc}; nothing in the file was "
                                   f"checked. Fix: {fix}", fix=fix)],
                     parse_rule_list(select), parse_rule_list(ignore))
    return check_source(text, name, select, ignore, importer=Importer(path))


def iter_files(paths: Iterable[str]) -> Iterator[Path]:
    """``.py`` and ``.ipynb`` files under ``paths`` (folders recursively, hidden and virtualenv folders skipped).

    Raises:
        LintUsageError: a path does not exist.
    """
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise LintUsageError(f"no such file or folder: {p!r}; give .py/.ipynb files or folders")
        if path.is_file():
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
            for f in sorted(files):
                if f.endswith((".py", ".ipynb")):
                    yield Path(root) / f


def check_paths(paths: Iterable[str], select=None, ignore=None) -> tuple[list[Finding], int]:
    """Check every file under ``paths``; returns ``(findings, number of files checked)``.

    Raises:
        LintUsageError: a path does not exist, or select/ignore name no known rule.
    """
    select, ignore = parse_rule_list(select), parse_rule_list(ignore)
    files = list(iter_files(paths))
    findings: list[Finding] = []
    for f in files:
        findings.extend(check_path(f, select, ignore))
    # one stable order for every run: by file, then cell, line, column, rule
    findings.sort(key=lambda f: (f.path, f.cell or 0, f.line, f.col, f.rule_id, f.message))
    return findings, len(files)
