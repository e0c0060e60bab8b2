"""Facts about one file that several rules share: strategies, strategy.run, scopes, what each function does.

A function's *summary* is the set of features its body has, through the local functions it calls:
``tape`` (``tf.GradientTape``), ``apply`` / ``apply_uncond`` (``apply_gradients``/``minimize``, the latter not
under an ``if``), ``fit``, ``run`` (``strategy.run``), ``backward``, ``optstep`` (``optimizer.step()``).
"""

from __future__ import annotations

import ast
from functools import cached_property

from allgpu.lint.resolve import Module, dotted, iter_body_nodes

RUN_ATTRS = ("run", "experimental_run_v2", "experimental_run")
DISTRIBUTE_ATTRS = (
    "experimental_distribute_dataset",
    "distribute_datasets_from_function",
    "experimental_distribute_datasets_from_function",
    "distribute_dataset",
)
TRAIN_FEATURES = frozenset({"tape", "apply", "fit", "backward", "optstep"})


def reachable_functions(mod: Module, roots) -> set[int]:
    """ids of the local functions in ``roots`` and of every local function they call, transitively."""
    out: set[int] = set()
    stack = list(roots)
    while stack:
        fn = stack.pop()
        if id(fn) in out:
            continue
        out.add(id(fn))
        for node in iter_body_nodes(fn.body):
            if isinstance(node, ast.Call):
                stack.extend(mod.local_functions(node.func))
    return out


def strategy_ctor(qn: str | None) -> tuple[str, str] | None:
    """``(framework, kind)`` when ``qn`` names a strategy class: ``("tf", "MirroredStrategy")``."""
    if not qn:
        return None
    last = qn.rsplit(".", 1)[-1]
    if not last.endswith("Strategy") or last == "Strategy":
        return None
    if qn.startswith("tensorflow.distribute."):
        return "tf", last
    if qn.startswith("allgpu."):
        return "allgpu", last
    return None


def _single_device(call: ast.Call, kind: str) -> bool:
    if kind == "OneDeviceStrategy":
        return True
    devices = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "devices"), None)
    return (kind == "MirroredStrategy" and isinstance(devices, (ast.List, ast.Tuple)) and len(devices.elts) == 1
            and not isinstance(devices.elts[0], ast.Starred))


class Facts:
    """Derived, cached facts about a :class:`Module`."""

    def __init__(self, mod: Module):
        self.mod = mod
        self._summaries: dict[int, frozenset[str]] = {}
        self._in_progress: set[int] = set()

    # --- strategies --------------------------------------------------------------------------------
    @cached_property
    def strategy_calls(self) -> list[tuple[ast.Call, str, str]]:
        """Every strategy constructor call: ``(call, framework, kind)``."""
        out = []
        for call, qn in self.mod.calls:
            sc = strategy_ctor(qn)
            if sc:
                out.append((call, *sc))
        return out

    @cached_property
    def strategy_names(self) -> dict[str, str]:
        """Dotted names bound to a strategy -> framework (through local functions that return one)."""
        returning: dict[str, str] = {}
        for call, fw, _ in self.strategy_calls:
            fn = self.mod.enclosing_function(call)
            if fn is not None and any(isinstance(n, ast.Return) for n in iter_body_nodes(fn.body)):
                returning[fn.name] = fw
        out: dict[str, str] = {}
        for name, values in self.mod.assigns.items():
            for v in values:
                if isinstance(v, ast.Call):
                    sc = strategy_ctor(self.mod.qualname(v.func))
                    if sc:
                        out[name] = sc[0]
                    elif isinstance(v.func, ast.Name) and v.func.id in returning:
                        out[name] = returning[v.func.id]
        return out

    def first_strategy_line(self, framework: str) -> int | None:
        """The line of the first strategy constructor of ``framework`` in the file (None when there is none)."""
        cache = self.__dict__.setdefault("_first_strategy_line", {})
        if framework not in cache:
            cache[framework] = min((c.lineno for c, fw, _ in self.strategy_calls if fw == framework), default=None)
        return cache[framework]

    def has_strategy(self, framework: str, multi_device: bool = True) -> bool:
        """A strategy of ``framework`` is constructed; with ``multi_device``, one that can span several devices
        (not ``OneDeviceStrategy``, nor a ``MirroredStrategy(devices=[one literal device])``)."""
        return any(fw == framework and not (multi_device and _single_device(call, kind))
                   for call, fw, kind in self.strategy_calls)

    def default_strategy(self, name: str | None) -> bool:
        """``name`` is bound only to one-device strategies: ``tf.distribute.get_strategy()`` (the default
        strategy, outside any scope), ``OneDeviceStrategy(...)``."""
        values = self.mod.assigns.get(name or "", [])
        return bool(values) and all(isinstance(v, ast.Call) and (self.mod.qualname(v.func) == "tensorflow.distribute."
                                                                 "get_strategy" or _single_device(v, (strategy_ctor(
                                                                     self.mod.qualname(v.func)) or ("", ""))[1]))
                                    for v in values)

    def strategy_handed(self) -> bool:
        """The file works with a tf.distribute strategy it does not construct: it opens ``X.scope()``, calls
        ``X.run``/``X.experimental_distribute_dataset`` on a strategy ``X`` made by a helper or handed in
        (``self.strategy``, ``get_distribution_strategy(...)``), not the default or a one-device strategy."""
        if any(fw == "tf" for _, fw, _ in self.strategy_calls):
            return self.has_strategy("tf")
        for call, _ in self.mod.calls:
            f = call.func
            if (isinstance(f, ast.Attribute) and f.attr in ("scope", "run", "experimental_run_v2",
                                                          "experimental_distribute_dataset",
                                                          "distribute_datasets_from_function")
                    and self.is_strategy_expr(f.value) and not self.default_strategy(dotted(f.value))
                    and not (isinstance(f.value, ast.Call) and self.mod.qualname(f.value.func) ==
                             "tensorflow.distribute.get_strategy")):
                return True
        return False

    def is_strategy_expr(self, node: ast.AST) -> bool:
        name = dotted(node)
        if name is not None:
            return name in self.strategy_names or "strategy" in name.rsplit(".", 1)[-1].lower()
        if isinstance(node, ast.Call):
            qn = self.mod.qualname(node.func) or ""
            return bool(strategy_ctor(qn)) or qn.endswith("get_strategy")
        return False

    def is_strategy_run(self, call: ast.Call) -> bool:
        f = call.func
        return isinstance(f, ast.Attribute) and f.attr in RUN_ATTRS and self.is_strategy_expr(f.value)

    @cached_property
    def scope_names(self) -> set[str]:
        """Names assigned from a ``.scope()`` call (``strategy_scope = strategy.scope()``)."""
        return {name for name, values in self.mod.assigns.items()
                if any(isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "scope"
                       for v in values)}

    def is_scope_expr(self, expr: ast.expr) -> bool:
        """``strategy.scope()``, a name assigned from one, a name that says it is a scope, or a call of the file's
        own context manager that enters one (``@contextmanager def maybe_distribute(s): with s.scope(): yield``)."""
        if isinstance(expr, ast.Call) and any(self._enters_scope(fn) for fn in self.mod.local_functions(expr.func)):
            return True
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "scope":
                return True
            if isinstance(node, (ast.Name, ast.Attribute)):
                name = dotted(node) or ""
                if name in self.scope_names:
                    return True
                if "scope" in name.rsplit(".", 1)[-1].lower() and "name_scope" not in name:
                    return True
        return False

    def _enters_scope(self, fn: ast.AST) -> bool:
        return any((dotted(d) or "").endswith("contextmanager") for d in getattr(fn, "decorator_list", ())) and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "scope"
            for n in ast.walk(fn))

    @cached_property
    def run_targets(self) -> set[int]:
        """ids of the local functions passed to ``strategy.run`` (and of those they call)."""
        roots = [fn for call, _ in self.mod.calls if self.is_strategy_run(call) and call.args
                 for fn in self.mod.local_functions(call.args[0])]
        return reachable_functions(self.mod, roots)

    # --- features ----------------------------------------------------------------------------------
    def call_features(self, call: ast.Call) -> set[str]:
        f = call.func
        out: set[str] = set()
        qn = self.mod.qualname(f)
        if qn and qn.endswith("GradientTape"):
            out.add("tape")
        if isinstance(f, ast.Attribute):
            attr = f.attr
            recv = (dotted(f.value) or "").lower()
            if attr in ("apply_gradients", "minimize"):
                out.add("apply")
            elif attr in ("fit", "fit_generator", "train_on_batch"):
                out.add("fit")
            elif attr == "backward":
                out.add("backward")
            elif attr == "step" and ("opt" in recv.rsplit(".", 1)[-1] or "scaler" in recv):
                out.add("optstep")
            if attr in RUN_ATTRS and self.is_strategy_expr(f.value):
                out.add("run")
        return out

    def summary(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        """Features of ``fn``'s body, through the local functions it calls (recursion-safe)."""
        key = id(fn)
        if key in self._summaries:
            return self._summaries[key]
        if key in self._in_progress:
            return frozenset()
        self._in_progress.add(key)
        feats = self.features(fn.body, fn)
        self._in_progress.discard(key)
        self._summaries[key] = frozenset(feats)
        return self._summaries[key]

    def features(self, stmts: list[ast.stmt], root: ast.AST) -> set[str]:
        """Features of ``stmts``; ``apply_uncond`` when an apply is reached with no ``if`` below ``root``."""
        out: set[str] = set()
        for node in iter_body_nodes(stmts):
            if not isinstance(node, ast.Call):
                continue
            feats = self.call_features(node)
            for fn in self.mod.local_functions(node.func):
                feats |= self.summary(fn)
            # an apply here, or one a callee makes unconditionally, is unconditional unless this call is under an if
            if ("apply" in feats and ("apply_uncond" in feats or "apply" in self.call_features(node))
                    and not self.under_if(node, root)):
                feats.add("apply_uncond")
            else:
                feats.discard("apply_uncond")
            out |= feats
        return out

    def under_if(self, node: ast.AST, root: ast.AST) -> bool:
        for anc in self.mod.ancestors(node):
            if anc is root:
                return False
            if isinstance(anc, (ast.If, ast.IfExp)):
                return True
        return False

    @cached_property
    def file_features(self) -> set[str]:
        feats: set[str] = set()
        for call, _ in self.mod.calls:
            feats |= self.call_features(call)
        return feats
