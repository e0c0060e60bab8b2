"""Is a statement reached by one process of the job only? Rank guards for PT007 (and any rule that needs them).

A *job* guard names the global rank (``dist.get_rank() == 0``, ``args.rank == 0``, ``is_main_process()``,
``master_process``). A *node* guard names a per-node rank: ``local_rank == 0``, ``LOCAL_RANK``,
``args.rank % ngpus_per_node == 0``. On one machine both pick one process, but on N machines a node guard lets N
processes write one path on a shared filesystem, so only job guards count (issue 11: "rank guards that are per
node rather than per job").
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.binding import instance_calls
from allgpu.lint.resolve import dotted

RANKISH = re.compile(r"rank|master|main_process|is_main|chief|primary|is_root|gpu_id|process_index|global_zero|"
                     r"process_zero|should_save")  # transformers' Trainer: is_world_process_zero(), args.should_save
_PER_NODE = re.compile(r"local_rank|localrank|local_process|local_main|local_primary|is_local_")


def _modulo_names(node: ast.AST) -> set[int]:
    """ids of the name nodes on the left of a ``%`` (``rank % ngpus_per_node``): a position within a node."""
    out: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            out |= {id(x) for x in ast.walk(n.left)}
    return out


def rank_kinds(node: ast.AST, mod=None, _depth: int = 0) -> set[str]:
    """``{"job"}``, ``{"node"}``, both, or empty: the kinds of rank names ``node`` mentions.

    With ``mod``, a name bound only to per-node tests (``is_master = local_rank == 0``) is per-node too."""
    if mod is not None and _depth == 0:
        memo = mod.__dict__.setdefault("_rank_kinds", {})
        if id(node) not in memo:
            memo[id(node)] = frozenset(_rank_kinds(node, mod, 0))
        return set(memo[id(node)])
    return _rank_kinds(node, mod, _depth)


def _rank_kinds(node: ast.AST, mod, _depth: int) -> set[str]:
    kinds: set[str] = set()
    per_node_pos = _modulo_names(node)
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.upper() == "LOCAL_RANK":
            kinds.add("node")  # int(os.environ["LOCAL_RANK"]) == 0
            continue
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and \
                str(n.slice.value).lower() in ("rank", "global_rank"):
            kinds.add("job")  # config["rank"] == 0, os.environ["RANK"]
            continue
        name = dotted(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
        if not name:
            continue
        low = name.lower()
        if _PER_NODE.search(low):
            kinds.add("node")
        elif RANKISH.search(low) or (mod is not None and name in _rank_arguments(mod)):
            # (a name given as init_process_group(..., rank=args.gpu) is the rank, whatever it is called)
            if id(n) in per_node_pos:
                kinds.add("node")
            elif mod is not None and _depth < 2 and _bound_per_node(mod, n, _depth):
                kinds.add("node")
            else:
                kinds.add("job")
    return kinds


def _rank_arguments(mod) -> frozenset[str]:
    """Names the file passes as ``rank=`` to ``init_process_group`` (the global rank, whatever they are called)."""
    found = mod.__dict__.get("_rank_arguments")
    if found is None:
        found = frozenset(dotted(k.value) for call, qn in mod.calls if qn == "torch.distributed.init_process_group"
                          for k in call.keywords if k.arg == "rank" and isinstance(k.value, (ast.Name, ast.Attribute)))
        mod.__dict__["_rank_arguments"] = found
    return found


def _bound_per_node(mod, name: ast.AST, depth: int) -> bool:
    values = mod.values_of(name)
    return bool(values) and all(rank_kinds(v, mod, depth + 1) == {"node"} for v in values)


def rankish(node: ast.AST) -> bool:
    """Does ``node`` mention any rank (job or node)? Used for per-rank file names and the like."""
    return bool(rank_kinds(node))


def is_job_guard(test: ast.AST, mod=None) -> bool:
    """A test that selects one process of the whole job (a per-node test alone does not)."""
    return "job" in rank_kinds(test, mod)


def one_branch(test: ast.expr) -> bool | None:
    """Which branch of ``if test:`` one process takes: True for the body (``rank == 0``, ``is_main_process()``),
    False for the ``else:`` (``rank != 0``, ``not is_master``, ``rank > 0``), None when it cannot be told."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = one_branch(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        zero = isinstance(right, ast.Constant) and right.value == 0
        if isinstance(op, (ast.Eq, ast.Is)):
            return True
        if zero and isinstance(op, (ast.NotEq, ast.IsNot, ast.Gt)):
            return False
        return None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        parts = [one_branch(v) for v in test.values if rank_kinds(v)]
        return True if parts and all(p is True for p in parts) else None
    return True if isinstance(test, (ast.Name, ast.Attribute, ast.Call)) else None


def _exits(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Continue, ast.Break, ast.Raise))


def _function_guard(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    name = fn.name.lower()
    if _PER_NODE.search(name):
        return False
    return bool(RANKISH.search(name)) or any(is_job_guard(d) for d in fn.decorator_list)


def _gate_name(test: ast.expr) -> ast.Name | None:
    """``x is not None``, ``x``, or either in an ``and``: the name ``if test:`` needs bound to an object."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((n for n in map(_gate_name, test.values) if n is not None), None)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) and \
            isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    return test if isinstance(test, ast.Name) else None


def gate_kind(mod, test: ast.expr, depth: int = 0) -> str | None:
    """``if saver is not None:`` where ``saver = None`` everywhere but under an ``if`` on the rank in the same
    function: ``"job"`` when every object ``saver`` is bound to is built under a job guard (the body runs on one
    process), ``"node"`` when under per-node guards (one process per machine), else None."""
    name = _gate_name(test)
    if name is None or depth > 1:
        return None
    kinds = set()
    for v in mod.values_of(name):
        if isinstance(v, ast.Constant) and v.value is None:
            continue
        st = mod.parent.get(id(v))
        if not isinstance(st, ast.Assign):
            return None
        kinds.add(_assign_guard(mod, st))
    return kinds.pop() if len(kinds) == 1 else None


def _assign_guard(mod, st: ast.stmt) -> str | None:
    """The kind of the nearest ``if`` on the rank whose body holds ``st`` (within its function), or None."""
    child = st
    for anc in mod.ancestors(st):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            return None
        if isinstance(anc, ast.If) and any(child is x for x in anc.body) and one_branch(anc.test) is True:
            kinds = rank_kinds(anc.test, mod)
            if "job" in kinds:
                return "job"
            if kinds == {"node"}:
                return "node"
        child = anc
    return None


def guarded(mod, node: ast.AST, depth: int = 0) -> bool:
    """Is ``node`` reached only on one rank of the job (an enclosing job guard, an early return on the other ranks,
    a ``*_on_master``/``is_main_process`` helper, or every call site of its function guarded)?"""
    child = node
    for anc in mod.ancestors(node):
        if isinstance(anc, ast.If) and is_job_guard(anc.test, mod):
            one = one_branch(anc.test)
            in_body = any(child is st for st in anc.body)
            if one is None or one == in_body:
                return True
        if isinstance(anc, ast.If) and any(child is st for st in anc.body) and gate_kind(mod, anc.test, depth) == "job":
            return True
        for field in ("body", "orelse", "finalbody") if not isinstance(anc, ast.Module) else ():
            block = getattr(anc, field, None)
            if isinstance(block, list) and child in block:
                for prev in block[:block.index(child)]:
                    if isinstance(prev, ast.If) and is_job_guard(prev.test, mod) and _exits(prev.body):
                        return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _function_guard(anc):
                return True
            if depth >= 3:
                return False
            # ``mp.spawn(worker, ...)`` runs it on every rank; ``trainer.save()`` calls Trainer.save of this file
            sites = (mod.callers(anc) + instance_calls(mod, anc)) or handed_to(mod, anc)
            if not sites and depth == 0 and (rank_aware_class(mod, anc) or calls_collective(mod, anc)):
                return False  # a method of a class that tests the rank elsewhere, left unguarded here; a function
                # that calls a collective (``dist.barrier()``) runs on every rank, or it would hang
            return all(guarded(mod, s, depth + 1) for s in sites)  # no call site here: cannot tell
        child = anc
    return False


def node_guarded(mod, node: ast.AST, depth: int = 0) -> bool:
    """Is ``node`` under a per-node test only (``if local_rank == 0``), here or at a call site of its function?
    Used to word the finding: one writer per machine rather than every rank."""
    for anc in mod.ancestors(node):
        if isinstance(anc, ast.If) and rank_kinds(anc.test, mod) == {"node"}:
            return True
        if isinstance(anc, ast.If) and depth == 0 and gate_kind(mod, anc.test, 1) == "node":
            return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return depth < 2 and any(node_guarded(mod, s, depth + 1) for s in mod.callers(anc))
    return False


def handed_to(mod, fn: ast.AST) -> list[ast.Call]:
    """Calls that are given ``fn`` itself to run: ``mp.spawn(worker, nprocs=n)``, ``Process(target=worker)``,
    ``launch(main, ...)``: each process the launcher starts runs it."""
    index = mod.__dict__.get("_handed_to")
    if index is None:
        index = {}
        for call, _ in mod.calls:
            for a in (*call.args, *(k.value for k in call.keywords)):
                if isinstance(a, ast.Name):
                    for d in mod.local_functions(a):
                        index.setdefault(id(d), []).append(call)
        mod.__dict__["_handed_to"] = index
    return index.get(id(fn), [])


def rank_aware_class(mod, fn: ast.AST) -> bool:
    """``fn`` is a method of a class that tests a rank somewhere (``if self.rank == 0:`` around another save):
    the class knows it runs on several processes, so a method it never guards is not guarded by its callers."""
    cls = mod.parent.get(id(fn))
    if not isinstance(cls, ast.ClassDef):
        return False
    memo = mod.__dict__.setdefault("_rank_aware_class", {})
    if id(cls) not in memo:
        memo[id(cls)] = any(isinstance(n, (ast.If, ast.IfExp)) and rank_kinds(n.test, mod) for n in ast.walk(cls))
    return memo[id(cls)]


COLLECTIVES = frozenset({"barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
                          "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
                          "gather", "gather_object", "scatter", "all_to_all", "monitored_barrier"})


def calls_collective(mod, fn: ast.AST) -> bool:
    """``fn`` itself (not a function nested in it) calls a torch.distributed collective outside any rank test:
    every rank runs it, so its unguarded statements run on every rank too."""
    memo = mod.__dict__.setdefault("_calls_collective", {})
    if id(fn) not in memo:
        found = False
        for call, qn in mod.calls:
            if qn and qn.startswith("torch.distributed.") and qn.rsplit(".", 1)[-1] in COLLECTIVES and \
                    mod.enclosing_function(call) is fn and not any(
                        isinstance(a, ast.If) and rank_kinds(a.test, mod) for a in mod.ancestors(call)):
                found = True
                break
        memo[id(fn)] = found
    return memo[id(fn)]
