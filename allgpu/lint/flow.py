"""Follow the code as it runs, entering the local functions it calls, and know whether a strategy scope is open.

Used by the "created outside ``strategy.scope()``" rules: a model built by a helper that is called inside
``with strategy.scope():`` (or in a class's ``__init__`` that is), or under a scope held in a variable
(``with strategy_scope:``), is inside the scope.
"""

from __future__ import annotations

import ast
from typing import Callable

from allgpu.lint.facts import Facts
from allgpu.lint.resolve import dotted

# Callback: (call, in_scope, stack). ``stack`` holds the statements and function definitions from the module
# body down to the statement that contains ``call``.
OnCall = Callable[[ast.Call, bool, list], None]

_BUDGET = 400_000  # statements visited at most per file: bounds pathological call graphs


def walk_scopes(facts: Facts, on_call: OnCall) -> None:
    """Call ``on_call`` for every call reached from the module body, with the scope state at that point.

    The walk is done once per file and replayed to every later caller (TF001 and AG001 share it).
    """
    events = facts.__dict__.get("_scope_events")
    if events is None:
        events = []
        _walk(facts, lambda call, in_scope, stack: events.append((call, in_scope, stack)))
        facts.__dict__["_scope_events"] = events
    for call, in_scope, stack in events:
        on_call(call, in_scope, stack)


def _walk(facts: Facts, on_call: OnCall) -> None:
    mod, budget, visited = facts.mod, [_BUDGET], set()

    def enter(fn: ast.AST, in_scope: bool, stack: list) -> None:
        key = (id(fn), in_scope, id(stack[-1]) if stack else 0)
        if key in visited or any(s is fn for s in stack):
            return
        visited.add(key)
        stmts(fn.body, in_scope, stack + [fn])

    by_stmt, method_calls = mod.calls_by_stmt, {}  # method_calls: ``trainer.build`` reached -> under a scope

    def calls_of(st: ast.stmt, in_scope: bool, stack: list) -> None:
        for node in by_stmt.get(id(st), ()):
            on_call(node, in_scope, stack)
            if isinstance(node.func, ast.Attribute) and not _is_self(node.func.value):
                method_calls[node.func.attr] = method_calls.get(node.func.attr, False) or in_scope
            for fn in mod.local_functions(node.func):
                enter(fn, in_scope, stack)
            handed = [a for a in (*node.args, *(k.value for k in node.keywords)) if isinstance(a, ast.Name)]
            if handed:  # ``app.run(main)``, ``Thread(target=...)``: the callee runs it; one that is also given a
                # strategy (``kt.Hyperband(build_model, distribution_strategy=s)``) runs it under its scope
                scoped = in_scope or _given_strategy(facts, node)
                for arg in handed:
                    for fn in mod.local_functions(arg):
                        enter(fn, scoped, stack)
            cls = mod.local_class(node.func)
            if cls is not None:
                for item in cls.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "__init__":
                        enter(item, in_scope, stack)

    def stmts(body: list, in_scope: bool, stack: list) -> None:
        for st in body:
            if budget[0] <= 0:
                return
            budget[0] -= 1
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            calls_of(st, in_scope, stack + [st])  # with-items, tests, iterables: before the body runs
            if isinstance(st, (ast.With, ast.AsyncWith)):
                opened = any(facts.is_scope_expr(item.context_expr) for item in st.items)
                stmts(st.body, in_scope or opened, stack)
                continue
            for fname in st._fields:
                value = getattr(st, fname, None)
                if not isinstance(value, list) or not value:
                    continue
                for v in value:
                    if isinstance(v, ast.stmt):
                        stmts([v], in_scope, stack)
                    elif isinstance(v, ast.excepthandler) or (hasattr(ast, "match_case") and isinstance(v, ast.match_case)):
                        stmts(v.body, in_scope, stack)

    stmts(mod.tree.body, False, [])
    for roots in (_uncalled_strategy_makers, strategy_class_roots):  # the second after the first's walk
        for fn in roots(facts, {key[0] for key in visited}):
            enter(fn, method_calls.get(fn.name, False) if roots is strategy_class_roots else False, [])


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


_PLAIN_BASES = ("object", "ABC", "abc.ABC", "keras.Model", "tensorflow.Module", "keras.callbacks.Callback")


def strategy_class_roots(facts: Facts, entered: set[int]) -> list:
    """The methods of a class that keeps a tf.distribute strategy on ``self`` (``self.strategy``,
    ``self._strategy``, a trainer's ``self.distribution_strategy``) that no method of the class calls and the walk
    from the module did not reach: a trainer's ``train()``/``fit()``/``build_model()`` run by code elsewhere.
    Where the class builds and trains under its own strategy is all in its methods, so they are walked as entry
    points too (under a scope only when the file calls a method of that name inside one). Classes derived from
    a project or library class are left alone: their base may call the method under its scope."""
    mod = facts.mod
    out = []
    for classes in mod.classes.values():
        for cls in classes:
            if mod.is_foreign(cls) or not _plain_bases(mod, cls) or not _holds_strategy(facts, cls):
                continue
            methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            called = {n.func.attr for m in methods for n in ast.walk(m)
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_self(n.func.value)}
            out += [m for m in methods if id(m) not in entered and m.name not in called
                    and m.name != "call" and not any(dotted(d) in ("property", "staticmethod") for d in m.decorator_list)]
    return out


def _plain_bases(mod, cls: ast.ClassDef) -> bool:
    return all((mod.qualname(b) or dotted(b) or "").endswith(_PLAIN_BASES) for b in cls.bases)


def _holds_strategy(facts: Facts, cls: ast.ClassDef) -> bool:
    return any(isinstance(n, ast.Attribute) and _is_self(n.value) and facts.is_strategy_expr(n)
               and not facts.default_strategy(dotted(n)) for n in ast.walk(cls))


def _uncalled_strategy_makers(facts: Facts, entered: set[int]) -> list:
    """Top-level functions nothing in the file reaches (a library module's ``train()``, run from elsewhere) that
    make their own tf.distribute strategy: the scope they open, or not, is all in their body, so they are walked
    as entry points too."""
    mod = facts.mod
    makers = {id(fn): fn for call, fw, _ in facts.strategy_calls if fw == "tf"
              for fn in [mod.enclosing_function(call)] if fn is not None and not mod.is_foreign(call)}
    if not makers and facts.strategy_handed():  # ``strategy = get_distribution_strategy(...)``, then its scope
        makers = {id(fn): fn for call, _ in mod.calls if isinstance(call.func, ast.Attribute)
                  and call.func.attr == "scope" and facts.is_strategy_expr(call.func.value)
                  for fn in [mod.enclosing_function(call)] if fn is not None and not mod.is_foreign(call)}
    return [fn for key, fn in makers.items() if key not in entered and mod.enclosing_function(fn) is None]


def _given_strategy(facts: Facts, call: ast.Call) -> bool:
    """``call`` receives a tf.distribute strategy as an argument (not ``strategy.run``, whose replica context is
    not the scope that creates mirrored variables): a library that builds what it is given under that strategy."""
    if isinstance(call.func, ast.Attribute) and facts.is_strategy_expr(call.func.value):
        return False
    for a in (*call.args, *(k.value for k in call.keywords)):
        if isinstance(a, (ast.Name, ast.Attribute, ast.Call)) and facts.is_strategy_expr(a):
            return True
    return False


def stack_targets(stack: list) -> set[str]:
    """The names that end up holding what the call on top of ``stack`` creates.

    The targets of the call's own statement; when that is a ``return``, the targets of the statement that
    called the function, and so on up. ``x = Dense(4)(inputs)`` inside a builder yields ``{"x"}``, not the
    caller's ``model``.
    """
    out: set[str] = set()
    st = target_stmt(stack)
    if isinstance(st, ast.Assign):
        targets = st.targets
    elif isinstance(st, (ast.AnnAssign, ast.AugAssign)):
        targets = [st.target]
    else:
        return out
    for t in targets:
        for sub in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
            name = dotted(sub)
            if name:
                out.add(name)
    return out


def target_stmt(stack: list) -> ast.stmt | None:
    """The statement whose targets receive what the call on top of ``stack`` creates (through ``return``s)."""
    i = len(stack) - 1
    while i >= 0 and isinstance(stack[i], ast.Return):
        while i >= 0 and not isinstance(stack[i], (ast.FunctionDef, ast.AsyncFunctionDef)):
            i -= 1
        i -= 1  # the caller's statement
    return stack[i] if i >= 0 else None


def call_site_note(stack: list) -> str:
    """`` (via the call at line N)`` when the creation happens in a function called from line N."""
    for i in range(len(stack) - 1, 0, -1):
        if isinstance(stack[i], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return f" (in {stack[i].name}(), called at line {stack[i - 1].lineno})"
    return ""


def emit_outside_scope(ctx, rule_id: str, classify: Callable[[ast.Call], object], trained: set[str],
                       describe: Callable[[object, str], str], unless: Callable[[list], bool] | None = None) -> None:
    """Emit ``rule_id`` at each creation reached outside ``strategy.scope()`` whose result is later trained.

    Args:
        ctx: the checker context (``ctx.facts``, ``ctx.emit``).
        classify: ``call -> kind`` (truthy for a creation: a model, optimizer, metric).
        trained: names the file trains (``model.fit``, ``optimizer.step``...).
        describe: ``(kind, name) -> message``; the call-site note (``in f(), called at line N``) is appended.
        unless: ``stack -> bool``; a creation for which it returns True is not reported (a rule's own exception).
    """
    nested = nested_check(ctx.facts, classify)

    def on_call(call: ast.Call, in_scope: bool, stack: list) -> None:
        if in_scope:
            return
        kind = classify(call)
        if not kind or nested(call):
            return
        names = stack_targets(stack) & trained
        if names and not (unless is not None and unless(stack)):
            ctx.emit(rule_id, call, describe(kind, sorted(names)[0]) + call_site_note(stack))

    walk_scopes(ctx.facts, on_call)


def nested_check(facts: Facts, classify: Callable[[ast.Call], str | None]) -> Callable[[ast.Call], bool]:
    """Wrap ``classify`` so a creation nested in another creation (a layer in ``Sequential([...])``) is skipped."""
    mod = facts.mod

    def is_nested(call: ast.Call) -> bool:
        for anc in mod.ancestors(call):
            if isinstance(anc, ast.stmt):
                return False
            if isinstance(anc, ast.Call) and classify(anc):
                return True
        return False

    return is_nested


def _distributes(facts: Facts, stmts: list) -> bool:
    """Do ``stmts`` construct a multi-device strategy or open a strategy's scope?"""
    cache = facts.__dict__.setdefault("_branch_distributes", {})
    key = id(stmts[0]) if stmts else 0
    if key not in cache:
        multi = {id(c) for c, fw, kind in facts.strategy_calls if fw == "tf" and kind != "OneDeviceStrategy"}
        cache[key] = any((isinstance(n, ast.Call) and id(n) in multi) or
                         (isinstance(n, (ast.With, ast.AsyncWith)) and any(facts.is_scope_expr(i.context_expr)
                                                                           for i in n.items))
                         for st in stmts for n in ast.walk(st))
    return cache[key]


def undistributed_branch(facts: Facts, nodes: list) -> bool:
    """Is one of ``nodes`` (a call and the statements that lead to it) in the branch of an ``if``/``else`` whose
    other branch makes the strategy (or opens its scope) while its own does not: ``if num_gpus > 1:
    strategy = MirroredStrategy() ... else: model = build()`` is the single-device path, where no strategy exists."""
    mod = facts.mod
    for node in nodes:
        child = node
        for anc in mod.ancestors(node):
            if isinstance(anc, ast.If) and anc.orelse:
                own, other = (anc.body, anc.orelse) if any(child is st for st in anc.body) else \
                    (anc.orelse, anc.body) if any(child is st for st in anc.orelse) else (None, None)
                if own is not None and _distributes(facts, other) and not _distributes(facts, own):
                    return True
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                break
            child = anc
    return False
