"""PyTorch rules PT001 and PT003-PT009, PT011 (PT002 is in rules_torch_device, PT010 in rules_env).

Rank guards come from ``rank_guard`` (job vs per-node), library BatchNorm models and loss-scaler accumulation
from ``torch_train``."""

from __future__ import annotations

import ast
import re

from allgpu.lint import bn_engines, bn_models, loader_scope, sampler_kinds, set_epoch, tfdata, torch_train
from allgpu.lint.caller_samplers import report_across_modules
from allgpu.lint.class_accumulation import CLASS_ACCUMULATION, class_accumulation_backwards
from allgpu.lint.accumulation import (engine_accumulation, no_sync_around_backward_only, stepped_every_k,
                                      unsynced_step_functions)
from allgpu.lint.helper_loaders import loaders_used_under_ddp, unsharded_loader_helpers
from allgpu.lint.helper_saves import object_saves
from allgpu.lint.rank_guard import calls_collective, guarded, node_guarded, rankish
from allgpu.lint.rules_torch_device import INIT_HELPER, check_pt002  # noqa: F401  (the checker finds PT002 here)
from allgpu.lint.astutil import star_kwarg
from allgpu.lint.torch_train import inference_only_loader
from allgpu.lint.resolve import dotted, has_star_kwargs, kwarg, literal_text

_WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel", "fully_shard", "replicate")
_SYNC_CALLS = ("all_reduce", "allreduce", "broadcast", "reduce_scatter", "broadcast_parameters",
               "distribute_tensor", "parallelize_module", "init_device_mesh", "DeviceMesh", "DTensor")
_OTHER_ENGINES = ("deepspeed", "accelerate", "horovod", "fairscale", "lightning", "pytorch_lightning", "allgpu")
_SYNC_BN = re.compile(r"(?i)sync_?batch_?norm|sync_?bn")
_NOT_WRAPPER = re.compile(r"setup|init|cleanup|destroy|^is_|^get_|rank|world")
_WRAPPER_HELPER = re.compile(r"ddp|fsdp|data_parallel|dataparallel|distributed_model|wrap_model|parallelize|shard_model")


# torchdata's StatefulDataLoader takes DataLoader's arguments (and checkpoints its position)
_LOADERS = ("torch.utils.data.DataLoader", "torchdata.stateful_dataloader.StatefulDataLoader")
_STARTERS = ("torch.distributed.init_process_group", "deepspeed.initialize", "deepspeed.init_distributed")


class TorchFacts:
    """What kind of torch script this is."""

    def __init__(self, mod):
        self.mod = mod
        self.dist = mod.is_imported("torch.distributed")
        self.wrapped = False
        for _, qn in mod.calls:
            if qn and qn.startswith("torch"):
                if qn.startswith("torch.distributed."):
                    self.dist = True
                if qn.rsplit(".", 1)[-1] in _WRAPPERS:
                    self.wrapped = True
        self.wrapped = self.wrapped or _wrapper_alias_called(mod)
        self.dist = self.dist or self.wrapped
        # the file starts the job itself (a training script, not a library that merely imports dist)
        self.started = self.wrapped or any(qn in _STARTERS or (
            qn and not qn.startswith("torch.") and INIT_HELPER.search(qn.rsplit(".", 1)[-1].lower()))
            for _, qn in mod.calls)  # ``utils.init_distributed_mode(args)`` starts it too
        # ``model = smart_DDP(model)``, ``make_data_parallel(model, ...)``: DDP through a project helper
        self.helper_wrapped = any(_wraps_model(c, qn) for c, qn in mod.calls)


def _wrapper_alias_called(mod) -> bool:
    """``Distributor = nn.parallel.DistributedDataParallel if use_cuda else ...; model = Distributor(model)``."""
    for name, values in mod.assigns.items():
        if "." in name or name not in mod.functions and not any(
                isinstance(v, (ast.IfExp, ast.Attribute, ast.Name)) for v in values):
            continue
        refs = [n for v in values for n in ast.walk(v) if isinstance(n, (ast.Attribute, ast.Name))]
        if any((mod.qualname(r) or "").rsplit(".", 1)[-1] in _WRAPPERS for r in refs) and \
                any(isinstance(c.func, ast.Name) and c.func.id == name for c, _ in mod.calls):
            return True
    return False


def _loader_calls(mod):
    return [(c, qn) for c, qn in mod.calls if qn in _LOADERS]


def _last_name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def check_pt001(ctx) -> None:
    for call, qn in ctx.mod.calls:
        if qn == "torch.nn.DataParallel":
            ctx.emit("PT001", call, "nn.DataParallel: one process drives all GPUs; use DistributedDataParallel")
        elif qn in ("torch.nn.parallel", "torch.nn.parallel.data_parallel") and _last_name(call.func) == "data_parallel":
            ctx.emit("PT001", call, "nn.parallel.data_parallel: one process scatters every batch over the GPUs; "
                                    "use DistributedDataParallel")


def _trained(ctx, call: ast.Call) -> bool:
    """The loader ``call`` builds is iterated by a training loop (here or in a local function it is passed to)."""
    parent = ctx.mod.parent.get(id(call))
    return isinstance(parent, ast.Assign) and any(dotted(t) and _trains_over(ctx, dotted(t)) for t in parent.targets)


def _loops_over(ctx) -> dict[str, list]:
    """Dotted name -> the for-loops that iterate it (``for x in loader``, ``enumerate(loader)``...)."""
    index = ctx.__dict__.get("_loops_over")
    if index is None:
        index = {}
        for loop in ctx.mod.loops:
            if not isinstance(loop, ast.While):
                name = dotted(tfdata.unwrap_iter(ctx.mod, loop.iter))
                if name:
                    index.setdefault(name, []).append(loop)
        ctx.__dict__["_loops_over"] = index
    return index


def _passed_as(ctx) -> dict[str, list]:
    """Dotted name -> ``(call, position)`` for each call that passes it positionally."""
    index = ctx.__dict__.get("_passed_as")
    if index is None:
        index = {}
        for call, qn in ctx.mod.calls:
            if qn is None:
                for i, arg in enumerate(call.args):
                    name = dotted(arg)
                    if name:
                        index.setdefault(name, []).append((call, i))
        ctx.__dict__["_passed_as"] = index
    return index


def _trains_over(ctx, name: str, depth: int = 0) -> bool:
    """Is ``name`` iterated by a training loop (here, or in a local function it is passed to)? Memoised."""
    memo = ctx.mod.__dict__.setdefault("_pt_trains_over", {})
    if (name, depth) not in memo:
        memo[(name, depth)] = _find_trains_over(ctx, name, depth)
    return memo[(name, depth)]


def _find_trains_over(ctx, name: str, depth: int) -> bool:
    mod, facts = ctx.mod, ctx.facts
    for loop in _loops_over(ctx).get(name, []):
        if facts.features(loop.body, loop) & {"backward", "optstep"}:
            return True
    if depth >= 2:
        return False
    for call, i in _passed_as(ctx).get(name, []):
        for fn in mod.local_functions(call.func):
            params = [a.arg for a in fn.args.args]
            if params and params[0] in ("self", "cls"):
                params = params[1:]
            if i < len(params) and _trains_over(ctx, params[i], depth + 1):
                return True
    return False


def check_pt003(ctx) -> None:
    mod = ctx.mod
    # apex's DistributedDataParallel runs one process per GPU too (NVIDIA's BERT, a0310)
    if not (ctx.torch.wrapped or any(qn == "apex.parallel.DistributedDataParallel" for _, qn in mod.calls)):
        for call, user in loaders_used_under_ddp(mod, TorchFacts) + loader_scope.unprepared_loaders(mod, lambda c: _trained(ctx, c)):
            ctx.emit("PT003", call, f"DataLoader without a DistributedSampler, used by {user}, which trains "
                                    "under DDP: every rank reads the whole dataset")
        return
    _check_pt003_helpers(ctx)
    for call, _ in _loader_calls(mod):
        sampler, known = star_kwarg(mod, call, "sampler")
        batch_sampler, known_b = star_kwarg(mod, call, "batch_sampler")
        if not (known and known_b):
            continue
        sampler = sampler or batch_sampler or (call.args[3] if len(call.args) > 3 else None)
        if isinstance(sampler, ast.Constant) and sampler.value is None:
            sampler = None  # ``sampler=None`` is no sampler at all
        if sampler is not None:  # a sequential one on one rank (prediction under is_main_process()) or on a
            # dataset cut by rank (``data[chunk * rank:...]``) duplicates nothing
            ds = call.args[0] if call.args else kwarg(call, "dataset")
            if torch_train.sampler_kind(mod, sampler) == "local" and (
                    torch_train.random_sampler(mod, sampler) or _trained(ctx, call)
                    or not (guarded(mod, call) or torch_train.shards_by_rank(mod, ds))):
                ctx.emit("PT003", call, "DataLoader under DDP with a non-distributed sampler: ranks see the same data")
            continue
        ds = call.args[0] if call.args else kwarg(call, "dataset")
        parent = mod.parent.get(id(call))
        names = [dotted(t) for t in parent.targets] if isinstance(parent, ast.Assign) else []
        if torch_train.iterable_dataset(mod, ds):
            # an iterable dataset takes no sampler: it must shard itself by rank; one of the project's own that
            # never reads a rank or splits its stream gives every rank all of it
            cls = torch_train.unsharded_iterable_class(mod, ds)
            if cls is not None and not torch_train.shards_by_rank(mod, ds) and any(n and _trains_over(ctx, n) for n in names):
                ctx.emit("PT003", call, f"DataLoader under DDP over `{cls.name}`, an IterableDataset that never "
                                        "splits its stream by rank: every rank reads all of it")
            continue
        shuffle = star_kwarg(mod, call, "shuffle")[0]
        shuffled = isinstance(shuffle, ast.Constant) and shuffle.value is True and not loader_scope.one_rank_evaluation(mod, call, names)
        if not (shuffled or any(n and _trains_over(ctx, n) for n in names)):
            continue
        if not (torch_train.shards_by_rank(mod, ds) or loader_scope.single_process_branch(mod, call)):  # or sharded by rank
            ctx.emit("PT003", call, "DataLoader under DDP without a DistributedSampler: every rank reads "
                                    "the whole dataset")


def _check_pt003_helpers(ctx) -> None:
    for call, fn in unsharded_loader_helpers(ctx.mod, lambda c: _trained(ctx, c)):
        ctx.emit("PT003", call, f"`{fn.name}()` (another module of the project) returns a shuffled DataLoader without "
                                "a DistributedSampler, used here under DDP: every rank reads the whole dataset")


def check_pt004(ctx) -> None:
    mod = ctx.mod
    if torch_train.sampler_delegated(mod):
        return
    for call in set_epoch.once_set_epochs(mod):
        ctx.emit("PT004", call, "set_epoch() is called once, not at the start of every epoch: every later epoch "
                                "shuffles the same way; call it first thing in each epoch (the loop, or an epoch-start hook)")
    report_across_modules(ctx)
    if "set_epoch" in mod.attrs:
        return
    unused = torch_train.unused_distributed_samplers(mod)
    for call in unused + torch_train.fresh_samplers(mod):
        ctx.emit("PT004", call, "DistributedSampler built and never used: no DataLoader takes it and nothing can "
                                "call its set_epoch(epoch); pass it as `sampler=` and set its epoch" if call in unused
                 else "each returned DataLoader gets a new DistributedSampler that nothing gives set_epoch(epoch): "
                      "every epoch shuffles the same way; pass the epoch in and set it")
    if not (torch_train.has_epoch_loop(mod) or sampler_kinds.passes_over_loader(mod)):
        return
    for call, qn in mod.calls:
        if sampler_kinds.distributed_sampler(mod, call, qn):
            shuffle = kwarg(call, "shuffle")
            if isinstance(shuffle, ast.Constant) and shuffle.value is False or torch_train.evaluation_sampler(mod, call):
                continue
            if torch_train.unused_distributed_samplers(mod).count(call) or set_epoch.reseeded_each_epoch(mod, call):
                continue  # reported above
            ctx.emit("PT004", call, "DistributedSampler is never given set_epoch(epoch): every epoch "
                                    "shuffles the same way")


def check_pt005(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if not facts.file_features & {"backward", "optstep"} and "fit" not in mod.attrs:
        return
    for call, _ in _loader_calls(mod):
        workers, known = star_kwarg(mod, call, "num_workers")
        if not known or inference_only_loader(mod, facts, call):
            continue
        if workers is None and len(call.args) > 6:
            workers = call.args[6]
        if workers is None or literal_text(mod, workers) == "0":
            ctx.emit("PT005", call, "DataLoader without worker processes: batches are prepared between "
                                    "steps while the GPUs wait")


def _does(mod, facts, call: ast.Call, feature: str) -> bool:
    """``call`` is ``loss.backward()`` (feature ``"backward"``) / ``optimizer.step()`` (``"optstep"``), or a call
    of a local function that runs one (``self._backward(loss)``, ``self.optimizer_step()``). Memoised per call."""
    memo = mod.__dict__.setdefault("_pt_does", {})
    key = (id(call), feature)
    if key not in memo:
        memo[key] = feature in facts.call_features(call) or any(
            feature in facts.summary(fn) for fn in mod.local_functions(call.func))
    return memo[key]


def _does_backward(mod, facts, call: ast.Call) -> bool:
    return _does(mod, facts, call, "backward")


def check_pt006(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    for back in no_sync_around_backward_only(ctx):
        ctx.emit("PT006", back, "model.no_sync() covers the backward but not the forward: DDP arms its all-reduce in "
                                "the forward, so every micro-step still syncs; run forward and backward inside no_sync()")
    backward = lambda c: _does_backward(mod, facts, c)  # noqa: E731
    if {"no_sync", "require_backward_grad_sync"} & mod.attrs.keys():
        # the file controls syncing somewhere: a micro-step loop in a function that does not (audiolm-pytorch, a0315)
        if mod.is_imported("accelerate") or ctx.torch.wrapped:
            for back in torch_train.micro_step_backwards(mod, facts, backward):
                ctx.emit("PT006", back, "accumulating gradients over micro-steps without no_sync() in this loop (the "
                                        "file uses it elsewhere): every micro-step all-reduces")
            for back in unsynced_step_functions(ctx, lambda c, feature: _does(mod, facts, c, feature))[:1]:
                ctx.emit("PT006", back, "accumulating gradients every k steps without no_sync() in this function "
                                        "(the file names it elsewhere): every micro-step all-reduces")
        return
    does = lambda c, feature: _does(mod, facts, c, feature)  # noqa: E731
    if engine_accumulation(ctx, backward, does):  # Accelerate, Lightning Fabric
        return
    aware = torch_train.distributed_aware(mod)
    wrapped = ctx.torch.wrapped or (ctx.torch.helper_wrapped and aware)  # ``smart_DDP(model)`` in a dist script
    if wrapped or aware:
        # ``loss_scaler(loss, opt, update_grad=(i + 1) % accum == 0)``: backward inside the wrapper every step
        for call in torch_train.wrapper_accumulation_calls(mod):
            ctx.emit("PT006", call, "accumulating gradients through a scaler's update_grad flag on a DDP model "
                                    "without no_sync(): every micro-step all-reduces")
            return
    for back in class_accumulation_backwards(ctx, does)[:1]:
        return ctx.emit("PT006", back, CLASS_ACCUMULATION)
    if not wrapped:
        return
    for back in stepped_every_k(ctx, does)[:1]:
        ctx.emit("PT006", back, "accumulating gradients under DDP without model.no_sync(): every micro-step all-reduces")
        return
    for back in torch_train.micro_step_backwards(mod, facts, backward):
        ctx.emit("PT006", back, "accumulating gradients over micro-steps under DDP without model.no_sync(): "
                                "every micro-step all-reduces")


def check_pt007(ctx) -> None:
    # an Accelerate script runs on every process ``accelerate launch`` starts (guard: accelerator.is_main_process);
    # in a file that starts no job, a function that calls a collective (dist.barrier()) still runs on every rank:
    # there a project object's save is reported (a library's own torch.save keeps its file's rank logic, unseen)
    mod = ctx.mod
    every = ctx.torch.started or any(qn == "accelerate.Accelerator" for _, qn in mod.calls)
    if not every and not ctx.torch.dist:
        return
    on_all = (lambda call: True) if every else \
        (lambda call: (fn := mod.enclosing_function(call)) is not None and calls_collective(mod, fn))
    for call, qn in mod.calls if every else ():
        if qn != "torch.save" or (len(call.args) > 1 and rankish(call.args[1])):
            continue  # a per-rank file (``f"shard_{rank}.pt"``) is meant to be written by every rank
        if guarded(mod, call):
            continue
        if node_guarded(mod, call):
            ctx.emit("PT007", call, "torch.save guarded by a per-node rank (local_rank): on several machines one "
                                    "process per node writes the same file; guard with `dist.get_rank() == 0`")
        else:
            ctx.emit("PT007", call, "torch.save runs on every rank: guard it with `if dist.get_rank() == 0:`")
    for call, where in object_saves(mod, lambda c: on_all(c) and not guarded(mod, c)):
        runs = "one process per node (a local_rank guard)" if node_guarded(mod, call) else "every rank"
        ctx.emit("PT007", call, f"`{ast.unparse(call.func)}()` writes with torch.save ({where}) and runs on {runs}: "
                                "guard the call with `if dist.get_rank() == 0:`")


def check_pt008(ctx) -> None:
    mod = ctx.mod
    if any(_SYNC_BN.search(n) for n in mod.attrs.keys() | mod.name_ids):
        return  # SyncBatchNorm, apex's convert_syncbn_model, an opt-in --sync-bn flag
    if not ctx.torch.wrapped:
        return bn_engines.engine_bn_models(ctx)  # models Accelerate or Lightning wrap in DDP
    for call, qn in mod.calls:
        if qn in ("torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d"):
            ctx.emit("PT008", call, "BatchNorm in a DDP model without SyncBatchNorm: statistics come from each GPU's own batch")
            return
    bn_calls = bn_models.library_bn_model_calls(mod, [c for c, qn in mod.calls
                                                        if qn == "torch.nn.parallel.DistributedDataParallel"])
    if bn_calls:
        # a torchvision/timm BatchNorm model (resnet, densenet...): report where that model is wrapped
        for call, qn in mod.calls:
            if qn == "torch.nn.parallel.DistributedDataParallel" and bn_models.wraps_one_of(mod, call, bn_calls):
                ctx.emit("PT008", call, "DDP wraps a BatchNorm model (a library's or the project's) without "
                                        "SyncBatchNorm: statistics come from each GPU's own batch")


def _wraps_model(call: ast.Call, qn: str | None) -> bool:
    """``make_data_parallel(model, ...)``, ``wrap_ddp(model)``: a project helper that wraps what it is given."""
    name = (_last_name(call.func) or "").lower()
    if (qn and qn.startswith("torch.")) or not call.args or not _WRAPPER_HELPER.search(name):
        return False
    if _NOT_WRAPPER.search(name):
        # ``init_distributed_data_parallel_model(self.base_model, ...)`` (ClassyVision) wraps the model it is
        # given; ``init_ddp(args)`` starts the process group
        first = (dotted(call.args[0]) or "").rsplit(".", 1)[-1].lower()
        return name.endswith("model") and ("model" in first or "net" in first)
    return True


def check_pt009(ctx) -> None:
    mod, facts = ctx.mod, ctx.facts
    if ctx.torch.wrapped or "backward" not in facts.file_features:
        return
    if any(mod.is_imported(e) for e in _OTHER_ENGINES) or {"rpc", "pipelining"} & mod.attrs.keys():
        return
    if any(q.startswith(("torch.distributed.rpc", "torch.distributed.pipelining")) for q in mod.aliases.values()):
        return
    names = mod.attrs.keys() | mod.name_ids
    if set(_SYNC_CALLS) & names or {"DistributedDataParallel", "FullyShardedDataParallel"} & names:
        return
    if ctx.torch.helper_wrapped:
        return  # ``model = make_data_parallel(model, ...)``: wrapped by a helper this file cannot see
    for call, qn in mod.calls:
        if qn == "torch.distributed.init_process_group":
            ctx.emit("PT009", call, "process group started but the model is not wrapped in "
                                    "DistributedDataParallel/FSDP: each rank trains its own copy")
            return


def _under_safe_globals(mod, call: ast.Call) -> bool:
    """``with torch.serialization.safe_globals([...]): torch.load(f)``: the code relies on the weights-only
    unpickler (the default since torch 2.6), allow-listing the classes it needs."""
    for anc in mod.ancestors(call):
        if isinstance(anc, (ast.With, ast.AsyncWith)):
            for item in anc.items:
                expr = item.context_expr
                if isinstance(expr, ast.Call) and (mod.qualname(expr.func) or "").endswith("safe_globals"):
                    return True
    return False


def check_pt011(ctx) -> None:
    for call, qn in ctx.mod.calls:
        if qn != "torch.load" or has_star_kwargs(call):
            continue
        wo = kwarg(call, "weights_only")
        if wo is None and _under_safe_globals(ctx.mod, call):
            continue
        if wo is None or (isinstance(wo, ast.Constant) and wo.value is False):
            note = "" if wo else " on torch < 2.6 (2.6 and later default to weights_only=True)"
            ctx.emit("PT011", call, "torch.load without weights_only=True unpickles arbitrary code" + note)
