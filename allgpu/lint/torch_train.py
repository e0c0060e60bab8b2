"""What a PyTorch training file builds and how it steps, for PT006 and PT008 (``ast`` only).

- BatchNorm models built elsewhere than the file's own ``nn.BatchNorm2d`` calls: in ``bn_models``.
- Gradient accumulation through a wrapper object or flag: the loss-scaler convention of timm, MAE, DeiT and
  Swin (``loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_iter == 0)``) runs ``backward()`` inside the
  wrapper on every micro-step and steps the optimizer only when the flag is true.
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.binding import name_loads
from allgpu.lint.rank_guard import rankish
from allgpu.lint.resolve import dotted, iter_body_nodes

_DIST_HINTS = ("all_reduce", "all_gather", "world_size", "get_rank", "synchronize_between_processes",
               "is_dist_avail_and_initialized", "barrier")


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
    """``backward`` calls in a micro-step loop, ``for _ in range(grad_accum_every): ... backward()`` (or over the
    chunks a batch is split into, ``for i in range(args.batch_chunk)``: NVIDIA's Transformer-XL, a0706), whose
    optimizer step comes after the loop: gradients accumulate over the loop (lucidrains' trainers, many
    Accelerate scripts). A backward under an ``if`` counts when every branch of that ``if`` runs one
    (``if args.fp16: scaled_loss.backward() else: loss.backward()``)."""
    out = []
    for loop in mod.loops:
        it = getattr(loop, "iter", None)
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args):
            continue
        if not any(_ACCUM.search(name) or _CHUNKS.search(name) for a in it.args for n in ast.walk(a)
                   if isinstance(n, (ast.Name, ast.Attribute)) for name in [(dotted(n) or "").lower()]):
            continue
        body = [n for n in iter_body_nodes(loop.body) if isinstance(n, ast.Call)]
        if any("optstep" in facts.call_features(n) for n in body):
            continue
        after = iter_body_nodes(_statements_after(mod, loop))
        if not any(isinstance(n, ast.Call) and "optstep" in facts.call_features(n) for n in after):
            continue
        out += [n for n in body if does_backward(n) and not sync_controlled(mod, n) and (
            not facts.under_if(n, loop) or _every_branch(mod, n, loop, does_backward))][:1]
    return out


_CHUNKS = re.compile(r"(^|[._])(batch_chunks?|n_?chunks|num_chunks|chunks)$")


def _every_branch(mod, node: ast.AST, loop: ast.AST, does) -> bool:
    """Each ``if`` between ``node`` and ``loop`` has an ``else`` and runs ``does`` in both branches."""
    for anc in mod.ancestors(node):
        if anc is loop:
            return True
        if isinstance(anc, ast.IfExp) or isinstance(anc, ast.If) and not (anc.orelse and all(
                any(isinstance(n, ast.Call) and does(n) for s in branch for n in ast.walk(s))
                for branch in (anc.body, anc.orelse))):
            return False
    return True


def _statements_after(mod, node: ast.stmt) -> list:
    """The statements after ``node`` in its block; when none steps, those after the ``with`` (or ``try``) that holds
    it too (``with accelerator.autocast(): for _ in range(k): ... backward()`` then ``optimizer.step()``)."""
    out = []
    for _ in range(3):
        parent = mod.parent.get(id(node))
        block = next((getattr(parent, f) for f in ("body", "orelse", "finalbody")
                      if isinstance(getattr(parent, f, None), list) and node in getattr(parent, f)), [])
        out += block[block.index(node) + 1:] if node in block else []
        if not isinstance(parent, (ast.With, ast.AsyncWith, ast.Try)):
            break
        node = parent
    return out


_SYNC_CONTROL = re.compile(r"no_sync|backward_sync|grad_sync|^accumulate$")


def sync_controlled(mod, node: ast.AST) -> bool:
    """Does the function around ``node`` decide when gradients sync: name no_sync / no_backward_sync /
    require_backward_grad_sync / accumulate, or enter a context of a local function that does
    (``with self.maybe_no_sync(i):``)? A file may control it in one trainer and not in another (audiolm-pytorch's
    SoundStream trainer against its transformer trainers, a0315)."""
    fn = mod.enclosing_function(node)
    if fn is None:
        return bool({"no_sync", "require_backward_grad_sync", "accumulate", "no_backward_sync"} & mod.attrs.keys())
    memo = mod.__dict__.setdefault("_sync_controlled", {})
    if id(fn) not in memo:
        memo[id(fn)] = _controls_sync(mod, fn, 0)
    return memo[id(fn)]


def _controls_sync(mod, fn, depth: int) -> bool:
    for n in ast.walk(fn):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name and _SYNC_CONTROL.search(name):
            return True
        if depth < 1 and isinstance(n, ast.withitem) and isinstance(n.context_expr, ast.Call) and any(
                _controls_sync(mod, f, depth + 1) for f in mod.local_functions(n.context_expr.func)):
            return True
    return False


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


def names_epoch(node: ast.AST) -> bool:
    """A name or attribute in ``node`` says epoch (``epoch``, ``args.num_epochs``, ``self.cur_epoch``)."""
    return any("epoch" in (dotted(n) or "").lower() for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute)))


def epoch_loop(loop: ast.AST) -> bool:
    """A ``for``/``while`` loop whose head names an epoch (``for epoch in range(n)``), or whose body counts one
    (``while it < max_iters: self.current_epoch += 1``, Pythia's trainer)."""
    if names_epoch(loop.test if isinstance(loop, ast.While) else ast.Tuple(elts=[loop.target, loop.iter])):
        return True
    return any(isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add) and names_epoch(s.target)
               for s in getattr(loop, "body", ()))


def has_epoch_loop(mod) -> bool:
    """The file holds an epoch loop (:func:`epoch_loop`)."""
    return any(epoch_loop(loop) for loop in mod.loops)


def fresh_samplers(mod) -> list[ast.Call]:
    """``return DataLoader(ds, sampler=self._get_sampler())`` where ``_get_sampler`` (or the argument itself)
    returns a new ``DistributedSampler(...)``: every call builds a loader whose sampler nobody keeps, so nobody
    gives it the epoch (ClassyVision's ``ClassyDataset.iterator()``, rebuilt each phase). The caller checks that
    the file calls ``set_epoch`` nowhere."""
    out = []
    for call, qn in mod.calls:
        if qn != "torch.utils.data.DataLoader" or mod.is_foreign(call) or \
                not isinstance(mod.parent.get(id(call)), ast.Return):
            continue
        value = next((k.value for k in call.keywords if k.arg == "sampler"), None)
        made = [value] if isinstance(value, ast.Call) else []
        for fn in (mod.local_functions(value.func) if isinstance(value, ast.Call) else [])[:1]:
            rets = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
            made = [v for r in rets for v in ([r] if isinstance(r, ast.Call) else mod.values_of(r)[:2])
                    if isinstance(v, ast.Call)]
        for m in made:
            if (mod.qualname(m.func) or "").endswith("DistributedSampler") and not evaluation_sampler(mod, m) and \
                    not (isinstance(kw := next((k.value for k in m.keywords if k.arg == "shuffle"), None), ast.Constant)
                         and kw.value is False):
                out.append(m)
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
    if key not in cache:  # ``data = data[chunk * rank:chunk * (rank + 1)]`` cuts it too
        cache[key] = any(isinstance(v, ast.Call) and shards_by_rank(mod, v) or isinstance(v, ast.Subscript) and any(
            rankish(n) for n in ast.walk(v.slice)) for v in mod.values_of(ds))
    return cache[key]


def sampler_kind(mod, node: ast.expr | None, depth: int = 0) -> str | None:
    """``"distributed"``, ``"local"`` (a non-distributed sampler) or None (unknown)."""
    values = [node] if isinstance(node, ast.Call) else mod.values_of(node)
    kinds = set()
    for v in values:
        qn = mod.qualname(v.func) if isinstance(v, ast.Call) else None
        if qn and qn.endswith("BatchSampler") and v.args and depth < 3:
            # ``BatchSampler(DistributedSampler(ds), B, drop_last=True)`` (DETR): the inner sampler decides
            kind = sampler_kind(mod, v.args[0], depth + 1)
            if kind is None:
                return None
            kinds.add(kind)
        elif qn and qn.endswith("DistributedSampler"):
            kinds.add("distributed")
        elif qn and qn.startswith("torch.utils.data.") and qn.endswith("Sampler"):
            kinds.add("local")
        else:
            return None
    return "local" if kinds == {"local"} else ("distributed" if kinds else None)


def random_sampler(mod, node: ast.expr, depth: int = 0) -> bool:
    """``node`` is (or names) a RandomSampler, WeightedRandomSampler, SubsetRandomSampler: one that shuffles;
    also inside a BatchSampler."""
    values = [node] if isinstance(node, ast.Call) else mod.values_of(node)
    for v in values:
        qn = (mod.qualname(v.func) or "") if isinstance(v, ast.Call) else ""
        if "Random" in qn or qn.endswith("BatchSampler") and v.args and depth < 3 and random_sampler(mod, v.args[0], depth + 1):
            return True
    return False
