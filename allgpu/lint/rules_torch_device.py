"""PT002: a device hard-coded in a script that starts a torch.distributed job (every rank on one GPU)."""

from __future__ import annotations

import ast
import re

from allgpu.lint.astutil import star_kwarg
from allgpu.lint.rank_guard import is_job_guard, rankish
from allgpu.lint.resolve import const_str, dotted, kwarg, literal_text

_INDEXED = re.compile(r"^cuda:\d+$")
INIT_HELPER = re.compile(r"^(init|setup|set_up|initiali[sz]e)_?(distributed|dist|ddp)|^(ddp|dist|distributed)_?(setup|init)")


def _replaced_later(mod, call: ast.Call) -> bool:
    """``device = torch.device('cuda:0')`` reassigned elsewhere (a default the local rank replaces)."""
    parent = mod.parent.get(id(call))
    if isinstance(parent, ast.Assign):
        for t in parent.targets:
            if len(mod.values_of(t)) > 1:
                return True
    return False


_SETS_DEVICE = ("torch.cuda.set_device", "torch.cuda.device", "torch.accelerator.set_device_index",
                "torch.distributed.device_mesh.init_device_mesh", "torch.distributed.init_device_mesh")


def _visible_per_rank(mod) -> bool:
    """``os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)``: each process sees only its GPU, as device 0."""
    return any(const_str(t.slice) == "CUDA_VISIBLE_DEVICES" and rankish(v) for t, v in mod.subscript_assigns)


def _device_per_rank(mod) -> bool:
    """Does each process pick its own GPU before a bare ``'cuda'`` (set_device, a device mesh, or
    ``CUDA_VISIBLE_DEVICES`` set from its rank)?"""
    if _visible_per_rank(mod):
        return True
    if any(qn in _SETS_DEVICE for _, qn in mod.calls):
        return True
    if any(qn == "torch.cuda.current_device" for _, qn in mod.calls):
        return True  # ``DDP(net, device_ids=[torch.cuda.current_device()])``: the device was set per rank elsewhere
    if any(INIT_HELPER.search(qn.rsplit(".", 1)[-1].lower()) for _, qn in mod.calls
           if qn and not qn.startswith("torch.")):
        return True  # ``utils.init_distributed_mode(args)`` (DeiT, DINO, MAE): such helpers call set_device
    return _project_sets_device(mod)


def _project_sets_device(mod) -> bool:
    """A module of the project this file imports calls ``torch.cuda.set_device`` (``from torch_utils import
    distributed as dist`` whose ``init()`` sets each rank's GPU before this file's code runs)."""
    if mod.importer is None:
        return False
    for target in set(mod.aliases.values()):
        for name in (target, target.rpartition(".")[0]):
            fm = mod.importer.load(name) if name and name.strip(".") else None
            if fm is not None and any(qn in _SETS_DEVICE for _, qn in fm.calls):
                return True
    return False


def _before_set_device(mod, call: ast.Call) -> bool:
    """Is ``call`` (``model.to(device)``, ``.cuda()`` on the bare ``'cuda'``) made before this function selects
    each rank's GPU: its function (or the module's top level) calls ``torch.cuda.set_device`` only on lines below it,
    outside any loop around both (the SMDDP MNIST script's ``DDP(Net().to(device))`` then ``set_device``, a0501)?
    The bare device names GPU 0 until then."""
    by_fn = mod.__dict__.get("_set_device_calls")
    if by_fn is None:  # once a module: the set_device calls by the function that holds them
        by_fn = mod.__dict__["_set_device_calls"] = {}
        for c, qn in mod.calls:
            if qn == "torch.cuda.set_device":
                by_fn.setdefault(id(mod.enclosing_function(c)), []).append(c)
    sets = by_fn.get(id(mod.enclosing_function(call)), [])
    if not sets or any(c.lineno <= call.lineno for c in sets):
        return False
    loops = (ast.For, ast.AsyncFor, ast.While)
    around = {id(a) for a in mod.ancestors(call) if isinstance(a, loops)}
    return not any(id(a) in around for c in sets for a in mod.ancestors(c))


def _bare_cuda_name(mod, node: ast.expr) -> bool:
    """A name every assignment of which is ``torch.device('cuda')`` (no index: the current GPU)."""
    values = mod.values_of(node) if isinstance(node, ast.Name) else []
    return bool(values) and all(isinstance(v, ast.Call) and mod.qualname(v.func) == "torch.device" and len(v.args) == 1
                                and not v.keywords and _device_text(mod, v.args[0]) == "cuda" for v in values)


def _device_text(mod, node: ast.expr) -> str | None:
    """A device literal, also through ``"cuda" if torch.cuda.is_available() else "cpu"`` (the GPU branch)."""
    if isinstance(node, ast.IfExp):
        texts = [literal_text(mod, b) for b in (node.body, node.orelse)]
        return next((t for t in texts if t and t.lower().startswith("cuda")), None)
    return literal_text(mod, node)


def check_pt002(ctx) -> None:
    mod, tf = ctx.mod, ctx.torch
    if not tf.started:
        return _check_helper_cuda(ctx)
    per_rank = _device_per_rank(mod)
    own_gpu_is_0 = _visible_per_rank(mod)  # then cuda:0 / device_ids=[0] is this process's own GPU
    for call, qn in mod.calls:
        f = call.func
        text = None
        if qn == "torch.device" and call.args:
            text = _device_text(mod, call.args[0])
            if text == "cuda" and len(call.args) > 1:
                idx = const_str(call.args[1])
                text = f"cuda:{idx}" if idx is not None else None
            if text and _replaced_later(mod, call):
                continue
        elif isinstance(f, ast.Attribute) and f.attr == "to" and qn is None:
            arg = call.args[0] if call.args else kwarg(call, "device")
            text = literal_text(mod, arg)
            if text is not None and text.isdigit():
                # ``model.to(0)``; not ``def main(rank): ... rank = 0 ... model.to(rank)`` (a parameter)
                text = None if _is_parameter(mod, arg, call) else f"cuda:{text}"
        elif isinstance(f, ast.Attribute) and f.attr == "cuda" and qn is None:
            arg = call.args[0] if call.args else kwarg(call, "device")
            if arg is None:
                text = "cuda"
            elif isinstance(arg, ast.Constant) and type(arg.value) is int:
                text = f"cuda:{arg.value}"
        if text is None and isinstance(f, ast.Attribute) and f.attr == "to" and per_rank and call.args:
            text = "cuda" if _bare_cuda_name(mod, call.args[0]) else None  # checked against set_device's line below
        if text is None or one_process_only(mod, call):
            continue
        text = text.strip().lower()
        if _INDEXED.match(text) and not (own_gpu_is_0 and text == "cuda:0"):
            ctx.emit("PT002", call, f"device {text!r} hard-coded in a distributed script: every rank uses that GPU")
        elif text == "cuda" and not per_rank:
            ctx.emit("PT002", call, "'cuda' without torch.cuda.set_device(local_rank): every rank uses GPU 0")
        elif text == "cuda" and qn != "torch.device" and _before_set_device(mod, call):
            ctx.emit("PT002", call, "'cuda' used before torch.cuda.set_device(local_rank) is called in this "
                                    "function: every rank puts this on GPU 0")
    if not own_gpu_is_0:
        _check_ddp_device_ids(ctx)


_DIST_FLAG = re.compile(r"distributed|ddp|is_initialized|multiprocessing|use_dist|is_dist")
_WORLD = re.compile(r"world_size|n_?gpus?|num_gpus|gpu_count|nprocs|num_processes|device_count")


def _distributed_when(test: ast.expr) -> bool | None:
    """True when ``test`` holds in the distributed run (``args.distributed``, ``world_size > 1``), False when it
    holds in the single-process run (``not args.distributed``, ``world_size == 1``), None when it says neither."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _distributed_when(test.operand)
        return None if inner is None else not inner
    text = (ast.unparse(test) if hasattr(ast, "unparse") else "").lower()
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _WORLD.search(text):
        right = test.comparators[0]
        if isinstance(right, ast.Constant) and right.value == 1:
            op = test.ops[0]
            if isinstance(op, (ast.Gt, ast.NotEq)):
                return True
            if isinstance(op, (ast.Eq, ast.LtE)):
                return False
        return None
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)) and _DIST_FLAG.search(text):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and "rank" in text:
        # ``local_rank > -1`` / ``!= -1`` / ``>= 0``: launched distributed; ``== -1`` / ``< 0``: a single process
        right, op = test.comparators[0], test.ops[0]
        value = right.value if isinstance(right, ast.Constant) else -right.operand.value if isinstance(
            right, ast.UnaryOp) and isinstance(right.op, ast.USub) and isinstance(right.operand, ast.Constant) else None
        if value == -1 and isinstance(op, (ast.Gt, ast.NotEq)) or value == 0 and isinstance(op, ast.GtE):
            return True
        if value == -1 and isinstance(op, (ast.Eq, ast.LtE)) or value == 0 and isinstance(op, ast.Lt):
            return False
    return None


def one_process_only(mod, node: ast.AST, depth: int = 0) -> bool:
    """Is ``node`` reached only by one process: the single-process branch of ``if args.distributed: ... else:``
    (or ``if world_size == 1:``), or under a job rank guard (``if rank == 0:``), where that process's GPU is the
    one named? Also inside a function every call of which is so (``evaluate()`` called under ``if rank == 0:``)."""
    child = node
    for anc in mod.ancestors(node):
        if isinstance(anc, ast.If):
            when = _distributed_when(anc.test)
            in_body = any(child is st for st in anc.body)
            if when is not None and when != in_body:
                return True
            if in_body and is_job_guard(anc.test, mod):
                return True
        if isinstance(anc, ast.IfExp):
            when = _distributed_when(anc.test)
            if when is not None and (child is anc.body) != when and child is not anc.test:
                return True
        if isinstance(anc, ast.Lambda):
            return False
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sites = mod.callers(anc) if depth < 2 else []
            return bool(sites) and all(one_process_only(mod, c, depth + 1) for c in sites)
        child = anc
    return False


def _is_parameter(mod, node: ast.expr | None, at: ast.AST) -> bool:
    """``node`` is a name bound as a parameter of a function around ``at`` (its value is not only the literal)."""
    if not isinstance(node, ast.Name):
        return False
    for anc in mod.ancestors(at):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = anc.args
            if node.id in {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}:
                return True
    return False


def _check_ddp_device_ids(ctx) -> None:
    """``DDP(model, device_ids=[0])``: every rank claims GPU 0."""
    for call, qn in ctx.mod.calls:
        if qn != "torch.nn.parallel.DistributedDataParallel" or one_process_only(ctx.mod, call):
            continue
        ids = star_kwarg(ctx.mod, call, "device_ids")[0] or (call.args[1] if len(call.args) > 1 else None)
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1:
            text = literal_text(ctx.mod, ids.elts[0])
            if text is not None and text.isdigit() and not _is_parameter(ctx.mod, ids.elts[0], call):
                ctx.emit("PT002", call, f"DistributedDataParallel(device_ids=[{text}]) hard-coded: every rank "
                                        "uses that GPU; pass [local_rank]")


def _check_helper_cuda(ctx) -> None:
    """A training helper that starts nothing itself (``utils_fit.fit_one_epoch``) moves tensors with a bare
    ``.cuda()``, and a module of the project that calls it starts DDP (``init_process_group``) without giving each
    process its GPU (no set_device, no per-rank CUDA_VISIBLE_DEVICES, no helper that would): every rank puts those
    tensors on GPU 0 (bubbliiiing's detection trainers, a1006-a1008)."""
    mod = ctx.mod
    if mod.importer is None:
        return
    bare: dict[int, list[ast.Call]] = {}
    for call, qn in mod.calls:
        f = call.func
        if qn is None and isinstance(f, ast.Attribute) and f.attr == "cuda" and not call.args and \
                not call.keywords and not mod.is_foreign(call) and not one_process_only(mod, call):
            fn = mod.enclosing_function(call)
            if fn is not None and mod.parent.get(id(fn)) is mod.tree:
                bare.setdefault(id(fn), []).append(call)
    fns = [fn for defs in mod.functions.values() for fn in defs if id(fn) in bare]
    if not fns:
        return
    for fm in mod.importer.users({fn.name for fn in fns}):
        if not any(qn == "torch.distributed.init_process_group" for _, qn in fm.calls) or _device_per_rank(fm):
            continue
        stem = mod.importer.path.stem  # the call must name this module's function: ``utils_fit.fit_one_epoch``
        called = {qn.rsplit(".", 1)[-1] for _, qn in fm.calls if qn and qn.rsplit(".", 2)[-2:-1] == [stem]}
        for fn in (f for f in fns if f.name in called):
            where = f"{fm.path.name}" if getattr(fm, "path", None) is not None else "another module"
            for call in bare.pop(id(fn), []):
                ctx.emit("PT002", call, f"'cuda' without a device: `{fn.name}()` runs under DDP in {where}, which "
                                        "never calls torch.cuda.set_device(local_rank): every rank puts this on GPU 0")
