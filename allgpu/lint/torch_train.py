"""What a PyTorch training file builds and how it steps, for PT006 and PT008 (``ast`` only).

- BatchNorm models that come from a library rather than from ``nn.BatchNorm2d`` calls in the file:
  ``torchvision.models.resnet50()``, ``models.__dict__[args.arch]()``, ``timm.create_model("resnet50")``.
- Gradient accumulation through a wrapper object or flag: the loss-scaler convention of timm, MAE, DeiT and
  Swin (``loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_iter == 0)``) runs ``backward()`` inside the
  wrapper on every micro-step and steps the optimizer only when the flag is true.
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.binding import name_loads
from allgpu.lint.project import find_def
from allgpu.lint.rank_guard import rankish
from allgpu.lint.resolve import const_str, dotted, iter_body_nodes

# torchvision/timm architectures built with BatchNorm layers (ViT, Swin, ConvNeXt, AlexNet, plain VGG have none)
_BN_ARCH = re.compile(r"^(resnet|resnext|wide_resnet|densenet|vgg\d+_bn|mobilenet|efficientnet|regnet|"
                      r"shufflenet|mnasnet|inception|googlenet|seresnet|resnest|darknet|cspdarknet|dla)")
_DIST_HINTS = ("all_reduce", "all_gather", "world_size", "get_rank", "synchronize_between_processes",
               "is_dist_avail_and_initialized", "barrier")


def _arch_name(mod, call: ast.Call) -> str | None:
    """The architecture a model-building call names: ``resnet50`` for ``torchvision.models.resnet50()``,
    ``timm.create_model("resnet50")``; ``"<any torchvision>"`` for ``models.__dict__[args.arch]()``."""
    func = call.func
    if isinstance(func, ast.Subscript) and (mod.qualname(func.value) or "") == "torchvision.models.__dict__":
        return "<any torchvision>"
    qn = mod.qualname(func) or ""
    if qn.startswith("torchvision.models."):
        return qn.rsplit(".", 1)[-1]
    if qn in ("timm.create_model", "timm.models.create_model") and call.args:
        return const_str(call.args[0])
    return None


def library_bn_model_calls(mod, wraps: list[ast.Call] = ()) -> list[ast.Call]:
    """Calls that build a library model with BatchNorm layers (a dynamic torchvision arch counts: most have),
    and, among the calls whose result reaches one of ``wraps`` (the DDP calls), calls of a project helper in
    another module that builds one (``model = build_model(args)`` with ``models.py`` calling
    ``torchvision.models.resnet50()`` and never converting to SyncBatchNorm)."""
    out, memo = [], {}
    feeding = {id(c) for w in wraps for c in _feeding_calls(mod, w)}
    for call, qn in mod.calls:
        arch = _arch_name(mod, call)
        if arch and (arch == "<any torchvision>" or _BN_ARCH.match(arch.lower())):
            out.append(call)
        elif id(call) in feeding and qn and not qn.startswith(("torch", "timm")) and not mod.is_foreign(call):
            for fn in mod.local_functions(call.func):
                if mod.is_foreign(fn):
                    if id(fn) not in memo:
                        memo[id(fn)] = _builds_bn_model(mod.owner(fn), fn)
                    if memo[id(fn)]:
                        out.append(call)
    return out


def _feeding_calls(mod, wrap: ast.Call) -> list[ast.Call]:
    """The calls whose result the module ``wrap`` wraps, through names and ``.cuda()``/``.to()`` (depth 4)."""
    target = wrap.args[0] if wrap.args else next((k.value for k in wrap.keywords if k.arg == "module"), None)
    out, todo, seen = [], [(target, 0)], set()
    while todo:
        node, depth = todo.pop()
        if node is None or depth > 4 or id(node) in seen:
            continue
        seen.add(id(node))
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "cuda", "to", "half", "float", "train"):
            node = node.func.value
        if isinstance(node, ast.Call):
            out.append(node)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            todo += [(v, depth + 1) for v in mod.values_of(node)]
    return out


def _builds_bn_model(owner, fn, depth: int = 0) -> bool:
    """``fn`` (of the project module ``owner``) returns a library BatchNorm model it builds, or (one level more,
    ``depth`` 0) an instance of a project class, or a project function's result, built the same way: SimCLR's
    ``load_model()`` returning ``SimCLR(args)``, whose ``__init__`` takes ``torchvision.models.resnet50()``."""
    if owner is None or not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn)):
        return False
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    if _mentions_sync_bn(fn):
        return False
    for call in calls:
        arch = _arch_name(owner, call)
        if arch and (arch == "<any torchvision>" or _BN_ARCH.match(arch.lower())):
            return True
    if depth:
        return False
    returned = _returned(fn)
    for call in calls:
        if id(call) not in returned:
            continue
        found = _project_def(owner, call.func)
        if found is None:
            continue
        inner, node = found
        if isinstance(node, ast.ClassDef):
            if not _mentions_sync_bn(node) and any(_builds_bn_model(inner, m, 1) or _bn_arch_in(inner, m)
                                                   for m in node.body if isinstance(m, ast.FunctionDef)):
                return True
        elif _builds_bn_model(inner, node, 1):
            return True
    return False


def _mentions_sync_bn(node) -> bool:
    names = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(node)
             if isinstance(n, (ast.Name, ast.Attribute))}
    return any(re.search(r"(?i)sync_?batch_?norm|sync_?bn", n) for n in names)


def _bn_arch_in(owner, fn) -> bool:
    """A method that builds a library BatchNorm model (``self.encoder = self.get_resnet(...)`` or the getter)."""
    return any(isinstance(c, ast.Call) and (a := _arch_name(owner, c)) and (a == "<any torchvision>" or
               _BN_ARCH.match(a.lower())) for c in ast.walk(fn))


def _returned(fn) -> set[int]:
    """ids of the calls whose value ``fn`` returns: directly, in a returned tuple, or through a returned name."""
    names, out = set(), set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and n.value is not None:
            for v in (n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]):
                if isinstance(v, ast.Call):
                    out.add(id(v))
                elif dotted(v):
                    names.add(dotted(v))
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and any(dotted(t) in names for t in n.targets):
            out.add(id(n.value))
    return out


def _project_def(owner, func: ast.expr):
    """``(module, class or function)`` that ``func`` names through ``owner``'s imports of its own project, or None."""
    path = getattr(owner, "path", None)
    qn = owner.qualname(func) or ""
    if path is None or "." not in qn.lstrip("."):
        return None
    module, _, name = qn.rpartition(".")
    return find_def(path, module, name)


def distributed_aware(mod) -> bool:
    """The file talks to other processes (imports torch.distributed, or calls an all-reduce/rank helper): a
    training helper module whose model is wrapped in DDP elsewhere in its project."""
    if mod.is_imported("torch.distributed"):
        return True
    names = mod.attrs.keys() | mod.name_ids
    return any(h in n.lower() for n in names for h in _DIST_HINTS)


def wrapper_accumulation_calls(mod) -> list[ast.Call]:
    """Calls inside a loop that pass a computed ``update_grad=`` flag: backward every micro-step, step when set."""
    out = []
    for call, _ in mod.calls:
        flag = next((kw.value for kw in call.keywords if kw.arg == "update_grad"), None)
        if flag is None or isinstance(flag, ast.Constant):
            continue
        if any(isinstance(a, (ast.For, ast.AsyncFor, ast.While)) for a in mod.ancestors(call)):
            out.append(call)
    return out


def wraps_one_of(mod, wrap: ast.Call, builds: list[ast.Call], depth: int = 0) -> bool:
    """Does the module ``wrap`` (``DDP(model, ...)``) wraps come from one of the ``builds`` calls, through
    ``.cuda()``/``.to()`` and names assigned from them (``model = resnet50(); model = model.cuda()``)?"""
    target = wrap.args[0] if wrap.args else next((k.value for k in wrap.keywords if k.arg == "module"), None)
    return target is not None and _comes_from(mod, target, {id(b) for b in builds}, 0)


def _comes_from(mod, node: ast.AST, build_ids: set[int], depth: int) -> bool:
    """``node`` contains a build call, or is a name / ``x.cuda()`` / ``x.to(d)`` chain back to one. Names in
    other arguments are not followed: ``LinearClassifier(model.fc.in_features)`` does not wrap ``model``."""
    if depth > 4:
        return False
    if any(id(n) in build_ids for n in ast.walk(node)):
        return True
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value  # model.cuda(), model.to(device), model.half()
    if isinstance(node, (ast.Name, ast.Attribute)):
        return any(_comes_from(mod, v, build_ids, depth + 1) for v in mod.values_of(node))
    return False


_TRAINING = frozenset({"backward", "optstep", "fit", "apply", "tape"})
_UNWRAP = ("enumerate", "iter", "tqdm", "islice", "zip")


def inference_only_loader(mod, facts, call: ast.Call) -> bool:
    """A DataLoader bound to a name that is only iterated by loops that do not train (sampling, generating
    class images, evaluation), possibly after ``loader = accelerator.prepare(loader)``: its workers do not
    decide the training speed."""
    st = mod.parent.get(id(call))
    if not isinstance(st, ast.Assign) or len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
        return False
    name, loops = st.targets[0].id, 0
    for use in name_loads(mod).get(name, []):
        node, parent = use, mod.parent.get(id(use))
        while isinstance(parent, ast.Call) and _callee(parent) in _UNWRAP:
            node, parent = parent, mod.parent.get(id(parent))
        if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
            if facts.features(parent.body, parent) & _TRAINING:
                return False
            loops += 1
            continue
        if isinstance(parent, ast.Call) and _callee(parent) == "prepare":
            continue  # ``loader = accelerator.prepare(loader)`` (or ``train_dl, eval_dl = prepare(...)``)
        return False
    return loops > 0 or any(_EVAL_WORD.match(w) for w in name.split("_"))


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


_ACCUM = re.compile(r"accum|update_freq|micro_?step|micro_?batch|iters_to_acc")


def micro_step_backwards(mod, facts, does_backward) -> list[ast.Call]:
    """``backward`` calls in a micro-step loop, ``for _ in range(grad_accum_every): ... backward()``, whose
    optimizer step comes after the loop: gradients accumulate over the loop (lucidrains' trainers, many
    Accelerate scripts)."""
    out = []
    for loop in mod.loops:
        it = getattr(loop, "iter", None)
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args):
            continue
        if not any(_ACCUM.search((dotted(n) or "").lower()) for a in it.args for n in ast.walk(a)
                   if isinstance(n, (ast.Name, ast.Attribute))):
            continue
        body = [n for n in iter_body_nodes(loop.body) if isinstance(n, ast.Call)]
        if any("optstep" in facts.call_features(n) for n in body):
            continue
        parent = mod.parent.get(id(loop))
        block = next((getattr(parent, f) for f in ("body", "orelse", "finalbody")
                      if isinstance(getattr(parent, f, None), list) and loop in getattr(parent, f)), [])
        after = block[block.index(loop) + 1:] if loop in block else []
        if not any(isinstance(n, ast.Call) and "optstep" in facts.call_features(n) for n in iter_body_nodes(after)):
            continue
        out += [n for n in body if does_backward(n) and not facts.under_if(n, loop)][:1]
    return out


_ITERABLE_LIBS = ("webdataset.", "torchdata.", "datasets.IterableDataset", "torch.utils.data.IterableDataset",
                  "torch.utils.data.datapipes", "streaming.StreamingDataset")


def iterable_dataset(mod, ds: ast.expr | None, depth: int = 0) -> bool:
    """``ds`` is an IterableDataset (directly, or through names): a class of the file or project deriving from
    one, a library stream (WebDataset, torchdata pipes, MosaicML streaming), ``load_dataset(..., streaming=True)``
    or ``.to_iterable_dataset()``. A DataLoader takes no sampler for those."""
    if ds is None or depth > 3:
        return False
    if isinstance(ds, (ast.Name, ast.Attribute)):
        return any(iterable_dataset(mod, v, depth + 1) for v in mod.values_of(ds)[:4])
    if not isinstance(ds, ast.Call):
        return False
    qn = mod.qualname(ds.func) or ""
    if qn.startswith(_ITERABLE_LIBS) or (isinstance(ds.func, ast.Attribute) and ds.func.attr == "to_iterable_dataset"):
        return True
    streaming = next((k.value for k in ds.keywords if k.arg == "streaming"), None)
    if isinstance(streaming, ast.Constant) and streaming.value is True:
        return True
    cls = mod.local_class(ds.func)
    return cls is not None and any("IterableDataset" in b for b in mod.class_bases(cls))


_SHARD_WORDS = ("rank", "world", "shard", "split", "node", "partition", "num_replicas", "process_index")


def unsharded_iterable_class(mod, ds: ast.expr | None, depth: int = 0) -> ast.ClassDef | None:
    """The file's (or project's) own IterableDataset class that ``ds`` builds, when nothing in the class reads
    the process's rank or splits its stream (no rank, world size, shard, split, node or partition name in it):
    every DDP rank then iterates the whole stream. None when it cannot be told (a library stream, a name)."""
    if ds is None or depth > 3:
        return None
    if isinstance(ds, ast.Name):
        values = mod.values_of(ds)[:4]
        found = [unsharded_iterable_class(mod, v, depth + 1) for v in values]
        return found[0] if values and all(f is not None for f in found) else None
    if not isinstance(ds, ast.Call):
        return None
    cls = mod.local_class(ds.func)
    if cls is None or not any("IterableDataset" in b for b in mod.class_bases(cls)):
        return None
    for n in ast.walk(cls):
        text = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else \
            n.arg if isinstance(n, ast.arg) else n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) \
            else ""
        if any(w in text.lower() for w in _SHARD_WORDS):
            return None
    return cls


def sampler_delegated(mod) -> bool:
    """A DistributedSampler handed to a function imported from elsewhere (``train(..., sampler=sampler)`` with
    ``from utils import train``): that helper can call ``set_epoch``, and this file cannot see it."""
    names = {name for name, values in mod.assigns.items()
             if any(isinstance(v, ast.Call) and (mod.qualname(v.func) or "").endswith("DistributedSampler")
                    for v in values)}
    if not names:
        return False
    for call, qn in mod.calls:
        if not qn or qn.startswith(("torch.", "logging.", "builtins.")) or "loader" in qn.rsplit(".", 1)[-1].lower():
            continue  # a loader factory (timm's create_loader) only wraps the sampler, it sets no epoch
        args = list(call.args) + [kw.value for kw in call.keywords]
        if any(dotted(a) in names for a in args):
            return True
    return False


def unused_distributed_samplers(mod) -> list[ast.Call]:
    """``sampler = DistributedSampler(ds)`` bound to a function's local name that nothing in that function reads
    (the loader below is built with ``sampler=None``, or the line was left over): the sampler shards nothing and
    no caller can reach it to call ``set_epoch``. Evaluation samplers and ``shuffle=False`` are left alone."""
    cached = mod.__dict__.get("_unused_samplers")
    if cached is not None:
        return cached
    out = []
    loads = name_loads(mod)
    for call, qn in mod.calls:
        if not (qn and qn.startswith("torch.") and qn.endswith("DistributedSampler")) or mod.is_foreign(call):
            continue
        st = mod.parent.get(id(call))
        fn = mod.enclosing_function(call)
        if fn is None or not isinstance(st, ast.Assign) or len(st.targets) != 1 or \
                not isinstance(st.targets[0], ast.Name) or st.value is not call:
            continue
        shuffle = next((k.value for k in call.keywords if k.arg == "shuffle"), None)
        if isinstance(shuffle, ast.Constant) and shuffle.value is False or evaluation_sampler(mod, call):
            continue
        name = st.targets[0].id
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(fn)):
            continue
        if not any(_nested_in(mod, u, fn) for u in loads.get(name, [])):
            out.append(call)
    mod.__dict__["_unused_samplers"] = out
    return out


def _nested_in(mod, node: ast.AST, fn: ast.AST) -> bool:
    return any(a is fn for a in mod.ancestors(node))


_EVAL_WORD = re.compile(r"(?i)^(val|valid|validation|validate|test|testing|eval|evaluate|evaluation|dev|infer|inference|"
                        r"predict|valset|testset|evalset|val\d*)$")


def evaluation_sampler(mod, call: ast.Call) -> bool:
    """A sampler over a validation set (``DistributedSampler(valset)``, ``val_sampler = ...``, in ``validate()``):
    the order of evaluation does not matter, so no set_epoch is needed. Names are read word by word
    (``val_loader``, ``test_set``; not ``interval`` nor ``train_and_evaluate``'s training sampler)."""
    st = next((a for a in mod.ancestors(call) if isinstance(a, ast.stmt)), None)
    fn = mod.enclosing_function(call)
    names = [dotted(call.args[0]) if call.args else None]
    names += [dotted(t) for t in st.targets] if isinstance(st, ast.Assign) else []
    words = [w for n in names if n for w in n.rsplit(".", 1)[-1].split("_")]
    if fn is not None and _EVAL_WORD.match(fn.name.lstrip("_").split("_")[0]):
        return True  # ``validate()``, ``evaluate_model()``, ``test_epoch()``
    return any(_EVAL_WORD.match(w) for w in words)


def shards_by_rank(mod, ds: ast.expr | None) -> bool:
    """The dataset is built with the process's rank (it reads only its own part)."""
    if isinstance(ds, ast.Call):
        return any(rankish(a) for a in list(ds.args) + [k.value for k in ds.keywords])
    key = dotted(ds)
    cache = mod.__dict__.setdefault("_shards_by_rank", {})
    if key not in cache:
        cache[key] = any(isinstance(v, ast.Call) and shards_by_rank(mod, v) for v in mod.values_of(ds))
    return cache[key]
