"""Is *this* binding of a name used later in a given way? Follows one assignment to its uses, not the name.

``model = build()`` outside the scope, used for ``evaluate``/``predict``/``save`` and then rebound under
``with strategy.scope(): model = build()`` before ``model.fit``: the first binding is never trained, although
the file trains something called ``model``. A use counts for a binding when it comes after it and before the
next assignment to the name in the same function (or module), or when it sits in another function that does
not bind the name itself and that is called or referenced in that window (``strategy.run(train_step)``), or
from another function's body (where the order cannot be told).
"""

from __future__ import annotations

import ast
import bisect


def _scope(mod, node: ast.AST):
    cache = mod.__dict__.setdefault("_binding_scope", {})
    key = id(node)
    if key not in cache:
        cache[key] = mod.enclosing_function(node)
    return cache[key]


def _store_scopes(mod, name: str) -> set[int]:
    cache = mod.__dict__.setdefault("_binding_store_scopes", {})
    if name not in cache:
        cache[name] = {id(_scope(mod, n)) for n in _stores(mod).get(name, [])}
    return cache[name]


def _names(mod) -> tuple[dict[str, list[ast.Name]], dict[str, list[ast.Name]]]:
    """(stores, loads): every bare-name occurrence by name, from one walk of the tree (cached)."""
    index = mod.__dict__.get("_binding_names")
    if index is None:
        stores: dict[str, list[ast.Name]] = {}
        loads: dict[str, list[ast.Name]] = {}
        for name, nodes in mod.name_nodes.items():
            for node in nodes:
                (stores if type(node.ctx) is ast.Store else loads).setdefault(name, []).append(node)
        index = mod.__dict__["_binding_names"] = (stores, loads)
    return index


def _stores(mod) -> dict[str, list[ast.Name]]:
    return _names(mod)[0]


def _loads(mod) -> dict[str, list[ast.Name]]:
    return _names(mod)[1]


def name_loads(mod) -> dict[str, list[ast.Name]]:
    """name -> every place the bare name is read (one walk of the tree, cached)."""
    return _names(mod)[1]


def _window_end(mod, stmt: ast.stmt, name: str) -> int | None:
    """The line of the next assignment to ``name`` in ``stmt``'s own function (or module), None if none."""
    end = getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
    lines = _store_lines(mod, name).get(id(_scope(mod, stmt)), [])
    i = bisect.bisect_right(lines, end)
    return lines[i] if i < len(lines) else None


def _store_lines(mod, name: str) -> dict[int, list[int]]:
    """id(function or None) -> sorted lines where ``name`` is assigned in that function (cached)."""
    cache = mod.__dict__.setdefault("_binding_store_lines", {})
    if name not in cache:
        by_scope: dict[int, list[int]] = {}
        for n in _stores(mod).get(name, []):
            by_scope.setdefault(id(_scope(mod, n)), []).append(n.lineno)
        cache[name] = {k: sorted(v) for k, v in by_scope.items()}
    return cache[name]


def _in_window(line: int, start: int, stop: int | None) -> bool:
    return line > start and (stop is None or line < stop)


def _binds_locally(mod, fn, name: str) -> bool:
    return id(fn) in _store_scopes(mod, name) or \
        name in {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}


def used_after(mod, stmt: ast.stmt, name: str, all_uses: dict[str, list[ast.AST]], depth: int = 0,
               returns: bool = True) -> bool:
    """Does one of ``all_uses[name]`` (nodes using the name) see the value ``stmt`` binds to ``name``?

    Dotted names (``self.model``) are object state: any use counts; so does any use when ``stmt`` is in another
    module of the project. A name bound inside a loop counts every use in that loop too (the next iteration
    reads it). A name a function binds and returns (``model = ...; return model``) is followed to the
    statements that call the function (every one of them; ``returns=False``: none, for a caller that follows
    one call path itself, see :func:`returned_binding`).
    """
    uses = all_uses.get(name, [])
    if "." in name or mod.is_foreign(stmt):
        return bool(uses) or (returns and depth < 3 and _returned_and_used(mod, stmt, name, all_uses, depth))
    if returns and _returned_and_used(mod, stmt, name, all_uses, depth):
        return True
    start = getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
    stop = _window_end(mod, stmt, name)
    scope = _scope(mod, stmt)
    loop = next((a for a in mod.ancestors(stmt) if isinstance(a, (ast.For, ast.While, ast.AsyncFor))
                 and _scope(mod, a) is scope), None)
    for use in uses:
        fn = _scope(mod, use)
        if fn is scope:
            if _in_window(use.lineno, start, stop) or (loop is not None and any(a is loop for a in mod.ancestors(use))):
                return True
            continue
        inner = fn
        while inner is not None and _scope(mod, inner) is not scope:  # the function directly under ``scope``
            inner = _scope(mod, inner)
        if inner is None or any(_binds_locally(mod, f, name) for f in _chain(mod, fn, inner)):
            continue
        if _referenced_in_window(mod, inner, scope, start, stop, depth):
            return True
    return False


def _returned_and_used(mod, stmt: ast.stmt, name: str, all_uses: dict, depth: int) -> bool:
    fn = _scope(mod, stmt)
    if fn is None or depth >= 3:
        return False
    if name not in _returned_names(mod, fn):
        return False
    owner = mod.owner(fn) if mod.is_foreign(fn) else None
    sites = mod.callers(fn) if owner is None else [c for c, _ in mod.calls if fn in mod.local_functions(c.func)]
    for call in sites:
        site = next((a for a in mod.ancestors(call) if isinstance(a, ast.stmt)), None)
        if isinstance(site, ast.Assign) and site.value is call:
            for t in site.targets:
                if isinstance(t, ast.Name) and used_after(mod, site, t.id, all_uses, depth + 1):
                    return True
    return False


def _returned_names(mod, fn) -> set[str]:
    cache = mod.__dict__.setdefault("_binding_returns", {})
    if id(fn) not in cache:
        cache[id(fn)] = {n.value.id for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)}
    return cache[id(fn)]


def _chain(mod, fn, top):
    """``fn`` and the functions enclosing it, up to ``top``."""
    while fn is not None:
        yield fn
        if fn is top:
            return
        fn = _scope(mod, fn)


def _referenced_in_window(mod, fn, scope, start: int, stop: int | None, depth: int) -> bool:
    """Is ``fn`` called or passed on (``strategy.run(fn)``) inside the window, or from another function?"""
    refs = [r for r in _loads(mod).get(fn.name, []) if _scope(mod, r) is not fn]  # not its own recursion
    if not refs:
        return True  # defined and never used here: called from elsewhere (a snippet, another module)
    for ref in refs:
        where = _scope(mod, ref)
        if where is scope:
            if _in_window(ref.lineno, start, stop):
                return True
        elif depth < 2:
            return True  # called from another function's body: the order cannot be told, count it
    for d in fn.decorator_list:  # an entry point another framework calls (``@app.route``): cannot tell
        if not isinstance(d, (ast.Name, ast.Attribute)) or (getattr(d, "attr", None) or getattr(d, "id", "")) not in (
                "function", "tf_function", "no_grad", "staticmethod"):
            return True
    return False


def after_strategy_ends(mod, facts, node: ast.AST) -> bool:
    """A module-level statement after the last use of every tf.distribute strategy the file makes: a later,
    unrelated snippet (a tutorial's single-device comparison), not code that runs under the strategy. Only said
    when every strategy is a plain name used at module level only (a function using it may run at any time)."""
    if _scope(mod, node) is not None:
        return False
    names = [n for n, fw in facts.strategy_names.items() if fw == "tf"]
    if not names or any("." in n for n in names):
        return False
    loads = [u for n in names for u in _loads(mod).get(n, [])]
    if any(_scope(mod, u) is not None for u in loads):
        return False
    used = [u for u in loads if isinstance(mod.parent.get(id(u)), ast.Attribute)
            and mod.parent[id(u)].attr in ("scope", "run", "experimental_distribute_dataset",
                                            "distribute_datasets_from_function")]
    if not used:  # a strategy made and never used: forgetting its scope is the very pitfall, not a later snippet
        return False
    last = max([u.lineno for u in loads] + [c.lineno for c, fw, _ in facts.strategy_calls if fw == "tf"])
    if node.lineno <= last:
        return False
    # and it never touches what was built under the strategy (an optimizer for the mirrored model is not unrelated)
    return not any(u.lineno >= node.lineno for n in scoped_names(mod, facts) for u in _loads(mod).get(n, []))


def scoped_names(mod, facts) -> set[str]:
    """Bare names assigned inside a ``with strategy.scope():`` block."""
    cached = mod.__dict__.get("_binding_scoped")
    if cached is None:
        cached = set()
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.With, ast.AsyncWith)) and any(facts.is_scope_expr(i.context_expr)
                                                                   for i in node.items):
                for st in ast.walk(node):
                    if isinstance(st, ast.Name) and isinstance(st.ctx, ast.Store):
                        cached.add(st.id)
        mod.__dict__["_binding_scoped"] = cached
    return cached


def returned_binding(mod, stack: list, targets) -> tuple[ast.stmt | None, set[str]]:
    """Follow what a function on ``stack`` returns to the call on ``stack`` that made it (not to every call of
    the function): ``m = Sequential(); return m`` inside ``get_model()`` reached from ``get_model().summary()``
    binds nothing there, although another call (``model = get_model()`` under the scope) trains its result.

    ``targets(stack) -> (statement, names)`` gives the binding of the creation on top of ``stack``. Returns the
    caller's statement and names when a name is returned (None and an empty set when the caller keeps nothing),
    else ``(None, set())`` when no function on the stack returns it."""
    st, names = targets(stack)
    end = len(stack)
    while st is not None and names:
        j = next((k for k in range(end - 1, -1, -1) if stack[k] is mod.enclosing_function(st)), None)
        if j is None or not (names & _returned_names(mod, stack[j])):
            return (st, names) if end < len(stack) else (None, set())
        end = j
        st, names = targets(stack[:j])
    return (st, names) if end < len(stack) else (None, set())


def instance_class(mod, obj: ast.expr, at: ast.AST):
    """(module, ClassDef) of the project class ``obj`` holds an instance of (``x = Cls(...)``, ``self.x = Cls(...)``,
    a parameter annotated ``x: Cls``; the class in this file or one it imports), or None."""
    if not isinstance(obj, (ast.Name, ast.Attribute)):
        return None
    for value in mod.values_of(obj)[:3]:
        if isinstance(value, ast.Call):
            cls = mod.local_class(value.func)
            if cls is not None:
                return (mod.owner(cls) or mod), cls
    if isinstance(obj, ast.Name):
        for anc in mod.ancestors(at):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in (*anc.args.posonlyargs, *anc.args.args, *anc.args.kwonlyargs):
                    if a.arg == obj.id and isinstance(a.annotation, (ast.Name, ast.Attribute)):
                        cls = mod.local_class(a.annotation)
                        if cls is not None:
                            return (mod.owner(cls) or mod), cls
                break
    return None


def instance_calls(mod, fn: ast.AST) -> list[ast.Call]:
    """Calls in this file of the method ``fn`` through an instance of its class (``trainer.save(...)`` with
    ``trainer = Trainer(...)``): calls that ``Module.callers`` (``self.save()``, plain functions) does not see."""
    cls = mod.parent.get(id(fn))
    if not isinstance(cls, ast.ClassDef) or mod.is_foreign(fn):
        return []
    index = mod.__dict__.get("_instance_calls")
    if index is None:  # method name -> calls ``x.name(...)`` on something other than self/cls
        index = {}
        for call, qn in mod.calls:
            func = call.func
            if qn is None and isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)) \
                    and not (isinstance(func.value, ast.Name) and func.value.id in ("self", "cls")):
                index.setdefault(func.attr, []).append(call)
        mod.__dict__["_instance_calls"] = index
    out = []
    for call in index.get(fn.name, ()):
        found = instance_class(mod, call.func.value, call)
        if found is not None and found[1] is cls:
            out.append(call)
    return out


def maybe_instance(mod, obj: ast.expr, at: ast.AST) -> bool:
    """Cheap test before :func:`instance_class`: is ``obj`` bound to a call of a capitalised name (``Cls(...)``,
    ``mod.Cls(...)``) or an annotated parameter? (Resolving the class may parse the project's modules.)"""
    for value in mod.values_of(obj)[:3]:
        if isinstance(value, ast.Call):
            f = value.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name[:1].isupper() and not (mod.qualname(f) or "").startswith(("torch.", "accelerate.", "deepspeed.")):
                return True
    return isinstance(obj, ast.Name) and any(
        isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            x.arg == obj.id and x.annotation is not None
            for x in (*a.args.posonlyargs, *a.args.args, *a.args.kwonlyargs))
        for a in mod.ancestors(at))
