"""Small readers of ``ast`` nodes shared by the resolver and the rules: dotted names, literals, keywords."""

from __future__ import annotations

import ast


def dotted(node: ast.AST | None) -> str | None:
    """``self.model.fit`` -> ``"self.model.fit"``; None for anything that is not a chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def const_str(node: ast.AST | None) -> str | None:
    """The value of a string or int literal as text, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return str(node.value)
    return None


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    """The value of keyword argument ``name`` of ``call``, or None."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def argument_for(call: ast.Call, fn: ast.FunctionDef, param: str, *, bound: bool) -> ast.expr | None:
    """The expression ``call`` passes to ``fn``'s parameter ``param``, by keyword or by position; None when it is not
    given or goes through ``*args``. ``bound``: ``fn`` is a method called on an instance (``trainer.train(ds)``,
    ``trainer(ds)`` for ``__call__``), so its first parameter takes no argument."""
    value = kwarg(call, param)
    if value is not None:
        return value
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)][1 if bound else 0:]
    i = names.index(param) if param in names else -1
    return call.args[i] if 0 <= i < len(call.args) and not isinstance(call.args[i], ast.Starred) else None


def base_name(expr: ast.expr) -> str | None:
    """The name a chain of calls, attributes and subscripts starts from (``e`` for ``e.batch(8)[0]``)."""
    while isinstance(expr, (ast.Call, ast.Attribute, ast.Subscript)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def passed_to(mod, name: ast.Name) -> list[ast.expr]:
    """What the calls in this file give the parameter ``name`` of the function it is read in (``def augment(ds):
    ... ds.map(f)`` called as ``augment(tf.data.TFRecordDataset(files))``): at most 8 calls; [] for other names."""
    fn = mod.enclosing_function(name)
    if fn is None or mod.is_foreign(fn):
        return []
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    if name.id not in params or name.id in ("self", "cls"):
        return []
    method = params[:1] in (["self"], ["cls"])
    found = (argument_for(c, fn, name.id, bound=method and isinstance(c.func, ast.Attribute))
             for c in mod.callers(fn)[:8])
    return [a for a in found if a is not None]


def has_star_kwargs(call: ast.Call) -> bool:
    """True when ``call`` passes ``**kwargs`` (its keywords cannot be known)."""
    return any(kw.arg is None for kw in call.keywords)


def iter_body_nodes(stmts: list[ast.stmt]):
    """Every node under ``stmts``, not descending into nested function or class definitions."""
    stack = list(reversed(stmts))
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            stack.append(child)


def literal_text(mod, node: ast.expr | None) -> str | None:
    """A literal, or a name whose every assignment is the same literal; None when it is computed."""
    text = const_str(node)
    if text is not None:
        return text
    if isinstance(node, ast.Name):
        values = mod.values_of(node)
        texts = {const_str(v) for v in values}
        if values and len(texts) == 1 and None not in texts:
            return texts.pop()
    return None


def star_kwarg(mod, call: ast.Call, name: str) -> tuple[ast.expr | None, bool]:
    """``(value, known)``: keyword ``name`` of ``call``, given directly or through ``**d`` where ``d`` is a dict
    literal or ``dict(...)`` the file builds (and fills with ``d['name'] = v``). ``known`` is False when some
    ``**x`` cannot be read (a parameter, a dict changed by ``.update``): then nothing can be said."""
    direct = kwarg(call, name)
    if direct is not None:
        return direct, True
    found, known = None, True
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        key = dotted(kw.value)
        values = mod.values_of(kw.value) if key else [kw.value]
        updates = _updates(mod, key) if key and key + ".update" in _called(mod) else []
        if not values or updates is None:
            known = False
            continue
        values = values + updates
        values = [b for v in values for b in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
        for val in values:  # ``{'num_workers': 1} if use_cuda else {}``: both branches
            if isinstance(val, ast.Dict):
                for k, v in zip(val.keys, val.values):
                    if k is None or not isinstance(k, ast.Constant):
                        known = False
                    elif k.value == name:
                        found = v
            elif isinstance(val, ast.Call) and dotted(val.func) == "dict" and not val.args:
                found = kwarg(val, name) or found
                known = known and not has_star_kwargs(val)
            else:
                known = False
        for target, value in mod.subscript_assigns:
            if key and dotted(target.value) == key and const_str(target.slice) == name:
                found = value
    return found, known


def _updates(mod, key: str) -> list[ast.expr] | None:
    """What ``key.update(...)`` calls merge into the dict ``key``: dict literals, ``dict(...)`` calls (an update's own
    keywords read as one), or names bound only to those (``train_kwargs.update(cuda_kwargs)``, PyTorch's MNIST
    example); None when one cannot be read."""
    out = []
    for c, _ in mod.calls:
        if not (isinstance(c.func, ast.Attribute) and c.func.attr == "update" and dotted(c.func.value) == key):
            continue
        if c.keywords:
            out.append(ast.Call(func=ast.Name(id="dict", ctx=ast.Load()), args=[], keywords=c.keywords))
        for a in c.args:
            vals = mod.values_of(a) if dotted(a) else [a]
            if not vals or not all(isinstance(v, ast.Dict) or isinstance(v, ast.Call) and dotted(v.func) == "dict"
                                   for v in vals):
                return None
            out += vals
    return out


def _called(mod) -> set[str]:
    cache = mod.__dict__.get("_astutil_called")
    if cache is None:
        cache = mod.__dict__["_astutil_called"] = {d for c, _ in mod.calls if (d := dotted(c.func))}
    return cache


def in_test_case(mod, node) -> bool:
    """``node`` is in a unit test: a method of a ``*TestCase`` class (tf.test, unittest, absltest, parameterized)
    or a ``test_*`` function, or anywhere in a module that defines such a class (its fixtures and helpers).
    Tests pick tiny fixed batches and skip prefetching on purpose."""
    test_module = mod.__dict__.get("_test_module")
    if test_module is None:
        test_module = mod.__dict__["_test_module"] = any(
            (dotted(b) or "").endswith("TestCase") for defs in mod.classes.values() for c in defs for b in c.bases)
    if test_module and not mod.is_foreign(node):
        return True
    for anc in mod.ancestors(node):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)) and anc.name.startswith("test"):
            return True
        if isinstance(anc, ast.ClassDef) and any((dotted(b) or "").endswith("TestCase") for b in anc.bases):
            return True
    return False
