"""What a call in a tf.data flow returns: the project function or method it calls (``load(files)``,
``Loader(files).build(64)``, ``loader.build(64)`` for ``loader = Loader(files)``), a callable instance's
``__call__``, and which element of a returned tuple a name unpacks."""

from __future__ import annotations

import ast

from allgpu.lint.resolve import Module, dotted, iter_body_nodes


def called_defs(mod: Module, func: ast.expr) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The definitions ``func`` calls: a function of the file or project (``Module.local_functions``), or the method
    of a project class that the receiver is an instance of (made right there, or bound to the name before)."""
    defs = mod.local_functions(func)
    if defs or not isinstance(func, ast.Attribute):
        return defs
    made = [func.value] if isinstance(func.value, ast.Call) else \
        mod.values_of(func.value)[:4] if isinstance(func.value, ast.Name) else []
    for v in made:
        cls = mod.local_class(v.func) if isinstance(v, ast.Call) else None
        found = [d for d in (cls.body if cls is not None else ()) if
                 isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == func.attr]
        if found:
            return found
    return []


def _returned(mod: Module, call: ast.Call, index: int | None = None) -> list[ast.expr]:
    """What the local function ``call`` calls returns; when it returns a tuple, element ``index`` (the caller
    unpacked it: ``a, b = f()``), nothing when the index is unknown."""
    out = []
    for fn in called_defs(mod, call.func):
        for node in iter_body_nodes(fn.body):
            if isinstance(node, ast.Return) and node.value is not None:
                v = node.value
                if not isinstance(v, ast.Tuple):
                    out.append(v)
                elif index is not None and index < len(v.elts):
                    out.append(v.elts[index])
    return out


def _callable_returns(mod: Module, fn: ast.expr) -> list[ast.expr]:
    """What calling ``fn`` returns: a project function named by ``fn``, or the ``__call__`` of the project class
    ``fn`` instantiates (``ToKShotDataset(k_shot=8)``)."""
    if isinstance(fn, ast.Call):
        cls = mod.local_class(fn.func)
        defs = [d for d in cls.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                and d.name == "__call__"] if cls is not None else []
    else:
        defs = mod.local_functions(fn)
    return [n.value for d in defs for n in iter_body_nodes(d.body) if isinstance(n, ast.Return) and n.value is not None]


def _unpacked_from(mod: Module, name: ast.expr, value: ast.expr) -> ast.expr | None:
    """For ``a, b = f()`` followed from ``a``: the element of ``f``'s returned tuple that ``a`` receives."""
    st = mod.parent.get(id(value))
    key = dotted(name)
    if not isinstance(value, ast.Call) or not isinstance(st, ast.Assign) or st.value is not value:
        return None
    for t in st.targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            for k, e in enumerate(t.elts):
                if dotted(e) == key:
                    rets = _returned(mod, value, k)
                    return rets[0] if len(rets) == 1 else None
    return None
