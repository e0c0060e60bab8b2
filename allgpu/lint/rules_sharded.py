"""PT012: the forward of a sharded model (FullyShardedStrategy, FSDP, ``fully_shard``) run under a rank guard.

A sharded model's forward is a collective: each layer all-gathers its parameters from every replica. Run by a
subset of replicas (``if is_chief:``, ``if rank == 0:``, ``if master_process:``, or their ``else:``), the others
never join the all-gather: the job hangs, or allgpu stops it naming the collective. nanoGPT's evaluation under
``if master_process:`` is the classic case (issue 24).

What counts as sharded: a name bound inside ``with strategy.scope():`` of an ``allgpu.FullyShardedStrategy``
(or ``tf.distribute`` spelling under allgpu), ``FSDP(model)`` / ``FullyShardedDataParallel(model)``, and the
argument of ``fully_shard(model)``. What counts as its forward: ``model(...)``, ``model.generate(...)``, and a
call of a local function that does either (given the model as an argument, or using it as a global).
"""

from __future__ import annotations

import ast

from allgpu.lint.rank_guard import rank_kinds
from allgpu.lint.resolve import dotted, iter_body_nodes

_FSDP_WRAP = ("FullyShardedDataParallel", "FSDP")
_FORWARD_ATTRS = ("generate", "forward")


def _sharded_strategies(mod) -> set[str]:
    """Names bound to ``FullyShardedStrategy(...)``."""
    return {name for name, values in mod.assigns.items() for v in values if isinstance(v, ast.Call)
            and (mod.qualname(v.func) or dotted(v.func) or "").endswith("FullyShardedStrategy")}


def sharded_names(ctx) -> set[str]:
    """Names (``model``, ``self.model``) that hold a sharded model."""
    mod = ctx.mod
    out: set[str] = set()
    for call, qn in mod.calls:
        f = call.func
        last = qn.rsplit(".", 1)[-1] if qn else f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if last in _FSDP_WRAP:
            st = next((a for a in mod.ancestors(call) if isinstance(a, ast.stmt)), None)
            if isinstance(st, ast.Assign) and st.value is call:
                out |= {dotted(t) for t in st.targets if dotted(t)}
        elif last == "fully_shard" and call.args and dotted(call.args[0]):
            out.add(dotted(call.args[0]))
    strategies = _sharded_strategies(mod)
    for attr in mod.attrs.get("scope", []) if strategies else ():
        item = mod.parent.get(id(mod.parent.get(id(attr))))
        if not isinstance(item, ast.withitem) or dotted(attr.value) not in strategies:
            continue
        for st in iter_body_nodes(mod.parent[id(item)].body):
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and not _optimizer(mod, st.value):
                out |= {dotted(t) for t in st.targets if dotted(t)}
    return out


def _optimizer(mod, call: ast.Call) -> bool:
    qn = mod.qualname(call.func) or ""
    return qn.startswith(("torch.optim", "torch.nn.", "torch.utils.data")) or "Loss" in qn


def _forward_of(node: ast.Call, names: set[str], tails: set[str] | None = None) -> str | None:
    """The sharded name ``node`` runs forward (``model(x)``, ``model.generate(...)``); ``tails``: the last part
    of each name, to skip most calls at once."""
    f = node.func
    tail = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    if tails is not None and tail not in _FORWARD_ATTRS and tail not in tails:
        return None
    if dotted(f) in names:
        return dotted(f)
    if isinstance(f, ast.Attribute) and f.attr in _FORWARD_ATTRS and dotted(f.value) in names:
        return dotted(f.value)
    return None


def _helper_forward(mod, call: ast.Call, names: set[str], depth: int = 0) -> str | None:
    """The sharded name a local function runs forward when called as ``call`` (argument or global)."""
    if depth > 2:
        return None
    fns = mod.local_functions(call.func)
    if not fns:
        return None
    for fn in fns:
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        given = {p: dotted(a) for p, a in zip(params, call.args) if dotted(a) in names}
        given |= {k.arg: dotted(k.value) for k in call.keywords if k.arg and dotted(k.value) in names}
        local = set(params)
        for node in iter_body_nodes(fn.body):
            if not isinstance(node, ast.Call):
                continue
            hit = _forward_of(node, set(given) | (names - local))
            if hit:
                return given.get(hit, hit)
            inner = _helper_forward(mod, node, names - local, depth + 1)
            if inner:
                return inner
    return None


def _rank_guard(mod, node: ast.AST) -> ast.If | None:
    """The nearest enclosing ``if`` whose test names a rank (either branch: both run on a subset)."""
    memo = mod.__dict__.setdefault("_pt012_rank_if", {})
    for anc in mod.ancestors(node):
        if isinstance(anc, ast.If):
            if id(anc) not in memo:
                memo[id(anc)] = bool(rank_kinds(anc.test, mod))
            if memo[id(anc)]:
                return anc
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return None
    return None


def check_pt012(ctx) -> None:
    mod = ctx.mod
    names = sharded_names(ctx)
    if not names:
        return
    tails = {n.rsplit(".", 1)[-1] for n in names}
    for call, qn in mod.calls:
        name, via = _forward_of(call, names, tails), ""
        if name is None and (qn is not None or not isinstance(call.func, (ast.Name, ast.Attribute))
                             or not mod.local_functions(call.func)):
            continue
        guard = _rank_guard(mod, call)  # cheap enough now: only forwards and calls of local functions get here
        if guard is None:
            continue
        if name is None:
            name = _helper_forward(mod, call, names)
            via = f" (inside {dotted(call.func)}())"
        if name is None:
            continue
        branch = "else branch of " if any(call is n or _inside(mod, call, n) for n in guard.orelse) else ""
        test = ast.unparse(guard.test) if hasattr(ast, "unparse") else "a rank test"
        ctx.emit("PT012", call, f"`{name}` is sharded and its forward{via} runs only in the {branch}"
                                f"`if {test}:` at line {guard.lineno}: the other replicas never join its "
                                "all-gathers, so the job hangs")


def _inside(mod, node: ast.AST, stmt: ast.stmt) -> bool:
    return any(a is stmt for a in mod.ancestors(node))
