"""TF001's flow beyond the creating function: an object created outside ``strategy.scope()`` and passed to a
function or class of the file that trains it (``train(model, optimizer, dataset, strategy)`` whose
``opt.apply_gradients`` runs in ``strategy.run``; ``Trainer(model, optimizer)`` keeping it as ``self.optimizer``);
whether a strategy can be in play on the path from creation to training; a deliberate baseline made before any
strategy."""

from __future__ import annotations

import ast
from typing import Callable

from allgpu.lint.binding import _binds_locally, _in_window, _window_end
from allgpu.lint.resolve import dotted


def trained_by_callee(mod, stmt: ast.stmt | None, names: set[str], uses: dict[str, list[ast.AST]],
                      mentions: Callable[[ast.AST], bool]) -> set[str]:
    """The names among ``names`` (bound by ``stmt``) handed, after ``stmt`` and in the same function, to a local
    function whose parameter of that place is trained there, or to a local class whose ``__init__`` keeps the
    parameter as ``self.attr`` that the file trains; and where a strategy is in play: the function that binds
    the name, the callee or the callee's class names one (``mentions``). A single-device loop handed an optimizer
    in a file whose other branch distributes is not the pitfall."""
    if stmt is None or not names or "." in "".join(names):
        return set()
    scope = mod.enclosing_function(stmt)
    caller_distributes = scope is not None and mentions(scope)
    end = getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
    out = set()
    given = _calls_by_scope(mod).get(id(scope), {})
    for call in sorted({id(c): c for n in names for c in given.get(n, ())}.values(), key=lambda c: c.lineno):
        if call.lineno <= end:
            continue
        for name in names - out:
            params = _params_given(call, name)
            if not params or not _in_window(call.lineno, end, _window_end(mod, stmt, name)) \
                    or _other_branch(mod, stmt, call):
                continue  # not given here, ``optimizer`` bound again before this call, or never both run
            bound = isinstance(call.func, ast.Attribute)  # ``obj.train(...)``: the method's ``self`` comes first
            fns = [(fn, int(bound and _is_method(mod, fn))) for fn in mod.local_functions(call.func)]
            cls = mod.local_class(call.func)
            if cls is not None:
                fns += [(item, 1) for item in cls.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"]
            if any(_trains_param(mod, fn, skip, params, uses) and (caller_distributes or mentions(fn) or (
                    skip and isinstance(mod.parent.get(id(fn)), ast.ClassDef) and mentions(mod.parent[id(fn)])))
                   for fn, skip in fns):
                out.add(name)
    return out


def _calls_by_scope(mod) -> dict[int, dict[str, list[ast.Call]]]:
    """id(enclosing function, or None for the module) -> name -> the file's own calls there that are given that
    bare name as an argument (built once)."""
    index = mod.__dict__.get("_tf_handoff_calls")
    if index is None:
        index = {}
        for call, _ in mod.calls:
            given = {a.id for a in (*call.args, *(k.value for k in call.keywords)) if isinstance(a, ast.Name)}
            if given and not mod.is_foreign(call):
                by_name = index.setdefault(id(mod.enclosing_function(call)), {})
                for name in given:
                    by_name.setdefault(name, []).append(call)
        mod.__dict__["_tf_handoff_calls"] = index
    return index


def _params_given(call: ast.Call, name: str) -> list[int | str]:
    """The places ``name`` takes in ``call``: positional indices and keyword names."""
    out: list[int | str] = [i for i, a in enumerate(call.args) if isinstance(a, ast.Name) and a.id == name]
    return out + [k.arg for k in call.keywords if k.arg and isinstance(k.value, ast.Name) and k.value.id == name]


def _trains_param(mod, fn: ast.FunctionDef, skip: int, places: list, uses: dict) -> bool:
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    names = {params[p + skip] if isinstance(p, int) and p + skip < len(params) else p for p in places}
    names = {n for n in names if isinstance(n, str) and (n in params or n in {a.arg for a in fn.args.kwonlyargs})}
    for n in names:
        if any(any(a is fn for a in mod.ancestors(u)) for u in uses.get(n, [])):
            return True
        kept = {dotted(t) for node in ast.walk(fn) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name) and node.value.id == n for t in node.targets}
        if any(k and k.startswith("self.") and uses.get(k) for k in kept):
            return True
    return False


def _is_method(mod, fn: ast.FunctionDef) -> bool:
    return isinstance(mod.parent.get(id(fn)), ast.ClassDef)


def _other_branch(mod, stmt: ast.stmt, call: ast.Call) -> bool:
    """``stmt`` and ``call`` sit in different branches of one ``if``/``else`` (never both run)."""
    branch = {}
    for anc in mod.ancestors(stmt):
        if isinstance(anc, ast.If):
            branch[id(anc)] = any(a in anc.body for a in [stmt, *mod.ancestors(stmt)])
    for anc in mod.ancestors(call):
        if isinstance(anc, ast.If) and id(anc) in branch:
            return branch[id(anc)] != any(a in anc.body for a in mod.ancestors(call))
    return False


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def strategy_on_path(mod, facts, stack: list, names: set[str], uses: dict[str, list[ast.AST]],
                     mentions: Callable[[ast.AST], bool]) -> bool:
    """A strategy can be in play where the object is made or trained: the file binds one at module level, or a
    function on the call path to the creation, a function (or its class) training it, names one. False for a
    single-device function in a file whose strategy lives only in another function (``plain_train()`` beside
    ``keras_train()`` that makes a MirroredStrategy)."""
    if any(mod.enclosing_function(c) is None for c, fw, _ in facts.strategy_calls if fw == "tf"):
        return True
    if facts.strategy_calls and not any(fw == "tf" for _, fw, _ in facts.strategy_calls):
        return False
    if any(mentions(st) for st in mod.tree.body if not isinstance(st, _DEFS)):
        return True  # a strategy bound or used at module level: every function may run under it
    fns = [n for n in stack if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for use in _trained_nodes(mod, names, uses, fns):
        fn = mod.enclosing_function(use)
        while fn is not None:
            fns.append(fn)
            fn = mod.enclosing_function(fn)
    for fn in fns:
        cls = mod.parent.get(id(fn))
        if mentions(fn) or (isinstance(cls, ast.ClassDef) and mentions(cls)):
            return True
    return not fns  # module-level code of a file that makes its strategy in a function: left as before


def _trained_nodes(mod, names: set[str], uses: dict, path: list) -> list[ast.AST]:
    """The nodes training ``names`` that can see this binding: any for object state (``self.model``); for a
    plain name, those on the call path or in a function that does not bind the name itself."""
    out = []
    for name in names:
        key = name if name in uses else name.rsplit(".", 1)[0]
        for use in uses.get(key, []):
            fn = mod.enclosing_function(use)
            if "." in key or fn is None or any(fn is f for f in path) or not _binds_locally(mod, fn, key):
                out.append(use)
    return out


def _name_lines(mod) -> dict[str, list[tuple[int, bool]]]:
    """name -> ``(line, is_store)`` for every occurrence of the bare name in the file (built once)."""
    index = mod.__dict__.get("_name_lines")
    if index is None:
        index = {}
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Name):
                index.setdefault(node.id, []).append((node.lineno, isinstance(node.ctx, ast.Store)))
        mod.__dict__["_name_lines"] = index
    return index


def baseline_before_strategy(ctx, stack: list, receiver: str | None = None) -> bool:
    """The object comes from a module-level assignment made before any strategy is constructed, and the name
    it is bound to is used only before that (until it is rebound): a deliberate single-device baseline, as bug
    reports and tutorials write to compare with the distributed run."""
    top = stack[0] if stack else None
    if isinstance(top, ast.Expr) and receiver:  # ``model.compile(optimizer=Adam())`` at module level
        names = [receiver]
    elif isinstance(top, ast.Assign):
        names = [t.id for t in top.targets if isinstance(t, ast.Name)]
    else:
        return False
    first = ctx.facts.first_strategy_line("tf")
    if first is None or top.lineno >= first or not names:
        return False
    end = getattr(top, "end_lineno", top.lineno) or top.lineno
    index = _name_lines(ctx.mod)
    for name in names:
        later = sorted(x for x in index.get(name, []) if x[0] > end)
        rebind = next((line for line, store in later if store), None)
        uses = [line for line, store in later if not store and (rebind is None or line < rebind)]
        if any(line >= first for line in uses):
            return False
    return True
