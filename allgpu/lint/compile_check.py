"""Errors that ``ast.parse`` accepts but ``compile()`` refuses: Python will not run such a file.

``compile()`` of a whole tree costs about a third of the linter's time on large files, so the checks the
compiler makes after parsing are redone here on the few nodes that can break them (collected by
:class:`~allgpu.lint.resolve.Module` in its single pass). Covered, with CPython's messages: ``return`` /
``yield`` / ``await`` outside a function, ``await`` outside an async function, ``yield`` inside a
comprehension, ``break`` / ``continue`` outside a loop, ``nonlocal`` at module level, duplicate argument
names, a name both parameter and ``global``, several starred targets in one assignment, assignment to
``__debug__``, ``from __future__`` imports after other statements or naming an unknown feature.
"""

from __future__ import annotations

import __future__
import ast

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPS = {ast.ListComp: "list comprehension", ast.SetComp: "set comprehension",
          ast.DictComp: "dict comprehension", ast.GeneratorExp: "generator expression"}


def compile_errors(mod, notebook: bool = False) -> list[tuple[int, int, str]]:
    """``(line, col, message)`` for each compile-time error found, in file order.

    Args:
        mod: the parsed :class:`~allgpu.lint.resolve.Module`.
        notebook: the text comes from notebook cells, where IPython allows a top-level ``await``.
    """
    out: list[tuple[int, int, str]] = []
    for node in mod.compile_watch:
        msg = _check(mod, node, notebook)
        if msg:
            out.append((node.lineno, node.col_offset + 1, msg))
    out += _function_errors(mod) + _future_errors(mod.tree) + _debug_errors(mod)
    return sorted(out)


def _enclosing(mod, node):
    """(nearest function/lambda/class/comprehension ancestor or None, the child of it on the way)."""
    prev = node
    for anc in mod.ancestors(node):
        if isinstance(anc, (*_FUNCS, ast.ClassDef, *_COMPS)):
            return anc, prev
        prev = anc
    return None, prev


def _check(mod, node, notebook: bool) -> str | None:
    if isinstance(node, ast.Return):
        scope, _ = _scope_skipping_comps(mod, node)
        return None if isinstance(scope, _FUNCS) else "'return' outside function"
    if isinstance(node, (ast.Yield, ast.YieldFrom)):
        scope, _ = _enclosing(mod, node)
        if type(scope) in _COMPS:
            return f"'yield' inside {_COMPS[type(scope)]}"
        return None if isinstance(scope, _FUNCS) else "'yield' outside function"
    if isinstance(node, ast.Await):
        scope, _ = _scope_skipping_comps(mod, node)
        if scope is None or isinstance(scope, ast.ClassDef):
            return None if notebook and scope is None else "'await' outside function"
        return None if isinstance(scope, ast.AsyncFunctionDef) else "'await' outside async function"
    if isinstance(node, (ast.Break, ast.Continue)):
        return None if _in_loop(mod, node) else (
            "'break' outside loop" if isinstance(node, ast.Break) else "'continue' not properly in loop")
    if isinstance(node, ast.Nonlocal):
        scope, _ = _enclosing(mod, node)
        return None if isinstance(scope, _FUNCS) else "nonlocal declaration not allowed at module level"
    if isinstance(node, ast.Starred):
        parent = mod.parent.get(id(node))
        if (isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parent.ctx, ast.Store)
                and parent.elts[0] is node and sum(isinstance(e, ast.Starred) for e in parent.elts) > 1):
            return "multiple starred expressions in assignment"
    return None


def _scope_skipping_comps(mod, node):
    for anc in mod.ancestors(node):
        if isinstance(anc, (*_FUNCS, ast.ClassDef)):
            return anc, None
    return None, None


def _in_loop(mod, node) -> bool:
    prev = node
    for anc in mod.ancestors(node):
        if isinstance(anc, (*_FUNCS, ast.ClassDef)):
            return False
        if isinstance(anc, _LOOPS) and any(prev is s for s in anc.body):
            return True
        prev = anc
    return False


def _params(fn) -> list[str]:
    if isinstance(fn, ast.Lambda):
        return []
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return names + [x.arg for x in (a.vararg, a.kwarg) if x is not None]


def _function_errors(mod) -> list[tuple[int, int, str]]:
    out = []
    for defs in mod.functions.values():
        for fn in defs:
            seen: set[str] = set()
            for n in _params(fn):
                if n in seen:
                    out.append((fn.lineno, fn.col_offset + 1, f"duplicate argument '{n}' in function definition"))
                    break
                seen.add(n)
    for node in mod.compile_watch:
        if isinstance(node, ast.Global):
            scope, _ = _enclosing(mod, node)
            params = set(_params(scope)) if isinstance(scope, _FUNCS) else set()
            out += [(node.lineno, node.col_offset + 1, f"name '{n}' is parameter and global")
                    for n in node.names if n in params]
    return out


def _future_errors(tree: ast.Module) -> list[tuple[int, int, str]]:
    out, leading = [], True
    for i, st in enumerate(tree.body):
        is_doc = i == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) \
            and isinstance(st.value.value, str)
        if isinstance(st, ast.ImportFrom) and st.module == "__future__" and st.level == 0:
            if not leading:
                out.append((st.lineno, st.col_offset + 1,
                            "from __future__ imports must occur at the beginning of the file"))
            for alias in st.names:
                if alias.name == "braces":
                    out.append((st.lineno, st.col_offset + 1, "not a chance"))
                elif alias.name not in __future__.all_feature_names:
                    out.append((st.lineno, st.col_offset + 1, f"future feature {alias.name} is not defined"))
        elif not is_doc:
            leading = False
    return out


def _debug_errors(mod) -> list[tuple[int, int, str]]:
    if "__debug__" not in mod.name_ids:
        return []
    return [(n.lineno, n.col_offset + 1, "cannot assign to __debug__") for n in ast.walk(mod.tree)
            if isinstance(n, ast.Name) and n.id == "__debug__" and isinstance(n.ctx, (ast.Store, ast.Del))]
