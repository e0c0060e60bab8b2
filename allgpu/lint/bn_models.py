"""BatchNorm models that DDP wraps, for PT008, when they come from elsewhere than ``nn.BatchNorm2d`` calls in the
checked file: a library (``torchvision.models.resnet50()``, ``models.__dict__[args.arch]()``,
``timm.create_model("resnet50")``), a project helper that returns one (``model = build_model(args)``), a project
class built on one (SimCLR's ``SimCLR(args)`` around ``torchvision.models.resnet50()``), or a project package of
models with BatchNorm layers picked by name (``models.__dict__[args.model]()``). Project modules are read through
``project.Importer`` (one re-export in a package's ``__init__`` followed); nothing is imported or run.
"""

from __future__ import annotations

import ast
import re

from allgpu.lint.project import Importer, find_def
from allgpu.lint.resolve import const_str, dotted

# torchvision/timm architectures built with BatchNorm layers (ViT, Swin, ConvNeXt, AlexNet, plain VGG have none)
_BN_ARCH = re.compile(r"^(resnet|resnext|wide_resnet|densenet|vgg\d+_bn|mobilenet|efficientnet|regnet|"
                      r"shufflenet|mnasnet|inception|googlenet|seresnet|resnest|darknet|cspdarknet|dla)")

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
        elif id(call) in feeding and not (qn or "").startswith(("torch", "timm")) and not mod.is_foreign(call):
            if _bn_arch_passed(mod, call) or _project_bn_class(mod, call):
                out.append(call)
                continue
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
    if any(_project_bn_zoo(owner, call) for call in calls):
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


_BN_LAYERS = ("torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d")


def _project_bn_zoo(owner, call: ast.Call) -> bool:
    """``models.__dict__[args.model](...)`` where ``models`` is a package of the project whose modules (its
    ``__init__`` and the submodules it imports relatively) never mention SyncBatchNorm and hold a class or
    function with ``nn.BatchNorm`` layers that they use (axial-deeplab's ``lib.models``; not I-JEPA's ViTs, whose
    only BatchNorm is in an unused convolutional stem)."""
    f = call.func
    if not (isinstance(f, ast.Subscript) and isinstance(f.value, ast.Attribute) and f.value.attr == "__dict__"):
        return False
    path, qn = getattr(owner, "path", None), owner.qualname(f.value.value)
    if path is None or not qn or qn.split(".")[0] in ("torch", "torchvision", "timm"):
        return False
    pkg = Importer(path).load(qn)
    if pkg is None or getattr(pkg, "path", None) is None:
        return False
    subs = {"." * n.level + (n.module or "") for n in ast.walk(pkg.tree) if isinstance(n, ast.ImportFrom) and n.level}
    mods = [pkg] + [m for m in (Importer(pkg.path).load(s) for s in sorted(subs) if s.strip(".")) if m is not None]
    if any(_mentions_sync_bn(m.tree) for m in mods):
        return False
    used = {n.id if isinstance(n, ast.Name) else n.attr for m in mods for n in ast.walk(m.tree)
            if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load)}
    for m in mods:  # a class or function with BatchNorm layers that the package's models use (not dead code)
        for node in m.tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in used and any(
                    isinstance(n, (ast.Attribute, ast.Name)) and m.qualname(n) in _BN_LAYERS for n in ast.walk(node)):
                return True
    return False


def _shuffles_bn(cls: ast.ClassDef) -> bool:
    """MoCo's shuffling BN: the class shuffles the batch across GPUs (``_batch_shuffle_ddp``) so that per-GPU
    BatchNorm statistics are what the method wants; SyncBatchNorm is deliberately not used."""
    return any(isinstance(m, ast.FunctionDef) and "shuffle" in m.name.lower() for m in cls.body)


def _bn_arch_passed(mod, call: ast.Call) -> bool:
    """A project builder handed a library BatchNorm architecture to build: ``SimSiam(models.__dict__[args.arch],
    dim)``, ``Builder(torchvision.models.resnet50)``, ``Wrapper(getattr(models, args.arch))`` (uncalled); not a
    class that shuffles the batch across GPUs for its BatchNorm (MoCo), nor a class that cannot be read."""
    cls = mod.local_class(call.func)
    if cls is None or _shuffles_bn(cls):
        return False  # a class this lint cannot read (the file alone) may shuffle its batch like MoCo's
    for v in list(call.args) + [k.value for k in call.keywords]:
        if isinstance(v, ast.Subscript) and (mod.qualname(v.value) or "") == "torchvision.models.__dict__":
            return True
        if isinstance(v, ast.Call) and dotted(v.func) == "getattr" and v.args and (
                mod.qualname(v.args[0]) or "") == "torchvision.models":
            return True
        qn = mod.qualname(v) if isinstance(v, (ast.Name, ast.Attribute)) else None
        if qn and qn.startswith("torchvision.models.") and _BN_ARCH.match(qn.rsplit(".", 1)[-1].lower()):
            return True
    return False


def _project_bn_class(mod, call: ast.Call) -> bool:
    """``call`` builds a class of another project module whose methods use ``nn.BatchNorm*`` layers or build a
    library BatchNorm model, and that never mentions SyncBatchNorm (``model = Net()`` with ``Net`` in
    ``models.py``; this file's own classes are seen through their ``nn.BatchNorm2d`` calls)."""
    found = _project_def(mod, call.func, checked=True)
    if found is None or not isinstance(found[1], ast.ClassDef) or _mentions_sync_bn(found[1]):
        return False
    inner, node = found
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
    if _shuffles_bn(node):
        return False
    return any(_bn_arch_in(inner, m) or any(isinstance(n, (ast.Attribute, ast.Name)) and inner.qualname(n) in
                                             _BN_LAYERS for n in _unconditional(m)) for m in methods)


def _unconditional(fn: ast.FunctionDef):
    """The nodes of ``fn`` outside every ``if`` and conditional expression: a layer added only ``if use_bn:``
    (vissl's DINOHead, off by default) is an option, not the model's."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.If, ast.IfExp)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


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


def _project_def(owner, func: ast.expr, checked: bool = False):
    """``(module, class or function)`` that ``func`` names through ``owner``'s imports of its own project, or None;
    ``checked``: ``owner`` is the checked file (read through its importer)."""
    path = getattr(owner, "path", None)
    importer = getattr(owner, "importer", None) if checked else None
    qn = owner.qualname(func) or ""
    if (path is None and importer is None) or "." not in qn.lstrip("."):
        return None
    module, _, name = qn.rpartition(".")
    return find_def(path, module, name) if path is not None else importer.find_def(module, name)


def wraps_one_of(mod, wrap: ast.Call, builds: list[ast.Call], depth: int = 0) -> bool:
    """Does the module ``wrap`` (``DDP(model, ...)``) wraps come from one of the ``builds`` calls, through
    ``.cuda()``/``.to()`` and names assigned from them (``model = resnet50(); model = model.cuda()``)?"""
    target = wrap.args[0] if wrap.args else next((k.value for k in wrap.keywords if k.arg == "module"), None)
    return target is not None and comes_from(mod, target, {id(b) for b in builds}, 0)


def comes_from(mod, node: ast.AST, build_ids: set[int], depth: int = 0) -> bool:
    """``node`` contains a build call, or is a name / ``x.cuda()`` / ``x.to(d)`` chain back to one. Names in
    other arguments are not followed: ``LinearClassifier(model.fc.in_features)`` does not wrap ``model``."""
    if depth > 4:
        return False
    if any(id(n) in build_ids for n in ast.walk(node)):
        return True
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value  # model.cuda(), model.to(device), model.half()
    if isinstance(node, (ast.Name, ast.Attribute)):
        return any(comes_from(mod, v, build_ids, depth + 1) for v in mod.values_of(node))
    return False
