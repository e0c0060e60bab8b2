"""Render findings as text, JSON or SARIF 2.1.0 (the format GitHub code scanning uploads)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import allgpu
from allgpu.lint.catalog import RULES
from allgpu.lint.findings import Finding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
INFO_URI = "https://github.com/allgpu/allgpu"


def format_text(findings: list[Finding], files_checked: int) -> str:
    """One ``path:line:col: ID [severity] message`` line per finding, then a summary line."""
    lines = [f"{f.location}: {f.id} [{f.severity}] {f.message}" for f in findings]
    if findings:
        by_rule = Counter(f.id for f in findings)
        detail = ", ".join(f"{rid} x{n}" for rid, n in sorted(by_rule.items()))
        lines.append(f"{len(findings)} finding(s) in {files_checked} file(s): {detail}. "
                     "`allgpu lint --explain ID` shows the fix.")
    else:
        lines.append(f"no findings in {files_checked} file(s)")
    return "\n".join(lines) + "\n"


def finding_dict(f: Finding) -> dict:
    """One lint finding in ``allgpu lint --format json``'s shape (unchanged since the first release):
    ``{path, line, col, rule_id, severity, message, cell, file_line}``."""
    return {"path": f.path, "line": f.line, "col": f.col, "rule_id": f.id, "severity": f.severity,
            "message": f.message, "cell": f.cell, "file_line": f.file_line}


def format_json(findings: list[Finding], files_checked: int) -> str:
    """``{"files_checked": N, "findings": [{path, line, col, rule_id, severity, message, cell, file_line}, ...]}``."""
    return json.dumps({"files_checked": files_checked, "findings": [finding_dict(f) for f in findings]},
                      indent=2) + "\n"


def _uri(path: str) -> str:
    """A SARIF ``uri``: relative to the working directory, percent-encoded (a space is ``%20``; SARIF 2.1.0
    3.10.2 requires a valid URI reference), or a ``file://`` URI outside it."""
    p = Path(path)
    try:
        p = p.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return p.resolve().as_uri()
    return quote(p.as_posix())


def sarif_log(findings: list[Finding]) -> dict:
    """The SARIF 2.1.0 log as a dict: one run, the whole rule catalogue, one result per finding.

    Source: OASIS SARIF 2.1.0 (``runs[].tool.driver.rules``, ``results[].locations[].physicalLocation``);
    GitHub code scanning needs ``ruleId``, ``message.text`` and a ``region.startLine`` on each result.
    Notebook findings point at the line of the ``.ipynb`` file (where Jupyter's layout allows finding it)
    and carry the cell and the line inside it in the message and in ``properties``.
    """
    ids = list(RULES)
    rules = [{
        "id": r.id,
        "name": r.title,
        "shortDescription": {"text": r.message},
        "fullDescription": {"text": r.explanation.splitlines()[0]},
        "help": {"text": r.explanation, "markdown": r.explanation},
        "defaultConfiguration": {"level": _LEVEL[r.severity]},
        "properties": {"tags": ["multi-gpu", r.id[:2]]},
    } for r in RULES.values()]
    results = []
    for f in findings:
        text = f"{f.message} (cell {f.cell}, line {f.line})" if f.cell is not None else f.message
        region = {"startLine": max(f.file_line or f.line, 1)}
        if f.cell is None:  # inside a notebook's JSON the cell's column is not the file's column
            region["startColumn"] = max(f.col, 1)
        result = {
            "ruleId": f.id,
            "ruleIndex": ids.index(f.id),
            "level": _LEVEL[f.severity],
            "message": {"text": text},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(f.path)},
                "region": region,
            }}],
            "partialFingerprints": {"allgpuLint/v1": f"{f.id}:{_uri(f.path)}:{f.cell or 0}:{f.line}"},
        }
        if f.cell is not None:
            result["properties"] = {"cell": f.cell, "lineInCell": f.line}
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "allgpu-lint", "version": allgpu.__version__,
                                "informationUri": INFO_URI, "rules": rules}},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }


def format_sarif(findings: list[Finding], files_checked: int) -> str:
    return json.dumps(sarif_log(findings), indent=2) + "\n"


FORMATS = {"text": format_text, "json": format_json, "sarif": format_sarif}


def statistics(findings: list[Finding]) -> list[tuple[str, int]]:
    """``(rule_id, count)`` per rule found, most frequent first, then by id (as ``ruff --statistics``)."""
    counts = Counter(f.rule_id for f in findings)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def format_statistics(findings: list[Finding], files_checked: int, fmt: str = "text") -> str:
    """The per-rule counts: a ``count  ID  [severity] title`` table, or JSON / SARIF-free JSON for ``fmt``
    other than text (``{"files_checked": N, "statistics": [{"rule_id", "count", "severity", "title"}]}``)."""
    rows = [(rid, n, RULES[rid].severity, RULES[rid].title) for rid, n in statistics(findings)]
    if fmt != "text":
        return json.dumps({"files_checked": files_checked,
                           "statistics": [{"rule_id": r, "count": n, "severity": sev, "title": t}
                                          for r, n, sev, t in rows]}, indent=2) + "\n"
    width = max((len(str(n)) for _, n, _, _ in rows), default=1)
    lines = [f"{n:>{width}}  {rid:<5}  [{sev}] {title}" for rid, n, sev, title in rows]
    lines.append(f"{len(findings)} finding(s) in {files_checked} file(s)" if rows
                 else f"no findings in {files_checked} file(s)")
    return "\n".join(lines) + "\n"
