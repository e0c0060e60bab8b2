"""PT008 for models an engine wraps in DDP: ``accelerator.prepare(model, ...)`` wraps each model in
DistributedDataParallel when Accelerate runs on several GPUs, so a BatchNorm model prepared that way normalises each
GPU's batch alone unless converted to SyncBatchNorm first (diffusers' AutoencoderKL training script, tuning half a0505:
its GAN discriminator). BatchNorm models: ``nn.BatchNorm*`` layers in the file, the torchvision/timm architectures of
:mod:`allgpu.lint.bn_models`, and the PatchGAN discriminator of taming-transformers (``NLayerDiscriminator``, built
with BatchNorm2d unless ``use_actnorm=True``).

Lightning likewise: a ``Trainer`` set to run on several GPUs with DDP (``gpus=2``, ``devices=4``, ``strategy="ddp"``,
``num_nodes=2``) fits each process's copy of the model on its own batch; BatchNorm layers are synchronised only with
``Trainer(sync_batchnorm=True)`` (byol-pytorch's Lightning example fitting a torchvision ResNet-50, tuning half
a0702)."""

from __future__ import annotations

import ast

from allgpu.lint import bn_models
from allgpu.lint.resolve import kwarg

_BN_LAYERS = ("torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d")
_PATCHGAN = ("taming.modules.losses.vqperceptual.NLayerDiscriminator",
             "taming.modules.discriminator.model.NLayerDiscriminator")


def engine_bn_models(ctx) -> None:
    """PT008 for a file that wraps no model in DDP itself but hands one to Accelerate or Lightning (the caller has
    checked that the file names no SyncBatchNorm)."""
    if ctx.mod.is_imported("pytorch_lightning") or ctx.mod.is_imported("lightning"):
        lightning_bn_fits(ctx)
    if ctx.mod.is_imported("accelerate"):
        prepared_bn_models(ctx)


def prepared_bn_models(ctx) -> None:
    """Emit PT008 at each ``accelerator.prepare(...)`` that takes a BatchNorm model (the caller has checked that the
    file names no SyncBatchNorm)."""
    mod = ctx.mod
    prepares = [c for c, _ in mod.calls if _is_prepare(mod, c)]
    if not prepares:
        return
    if any(qn in _BN_LAYERS for _, qn in mod.calls):
        ctx.emit("PT008", prepares[0], "a model with BatchNorm layers prepared by Accelerate (DDP on several GPUs) "
                                       "without SyncBatchNorm: statistics come from each GPU's own batch")
        return
    builds = bn_models.library_bn_model_calls(mod) + [c for c, qn in mod.calls if qn in _PATCHGAN and not (
        isinstance(kwarg(c, "use_actnorm"), ast.Constant) and kwarg(c, "use_actnorm").value is True)]
    ids = {id(b) for b in builds}
    for prep in prepares:
        if any(bn_models.comes_from(mod, arg, ids) for arg in prep.args):
            ctx.emit("PT008", prep, "Accelerate prepares a BatchNorm model (DDP on several GPUs) without "
                                    "SyncBatchNorm: statistics come from each GPU's own batch")
            return


def _is_prepare(mod, call: ast.Call) -> bool:
    """``accelerator.prepare(...)`` where ``accelerator`` is bound to ``accelerate.Accelerator(...)``."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "prepare" and call.args):
        return False
    return any(isinstance(v, ast.Call) and mod.qualname(v.func) == "accelerate.Accelerator"
               for v in mod.values_of(f.value))


_PL_TRAINERS = ("pytorch_lightning.Trainer", "pytorch_lightning.trainer.Trainer",
                "pytorch_lightning.trainer.trainer.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer",
                "lightning.pytorch.trainer.Trainer")
_GPU_KWARGS = ("gpus", "devices", "num_nodes")
_MODE_KWARGS = ("strategy", "accelerator", "distributed_backend")


def lightning_bn_fits(ctx) -> None:
    """Emit PT008 at each Lightning ``Trainer(...)`` set for several GPUs with DDP and without ``sync_batchnorm``
    whose ``fit`` trains a BatchNorm model (:func:`_bn_model`)."""
    mod = ctx.mod
    for call, qn in mod.calls:
        if qn not in _PL_TRAINERS or mod.is_foreign(call) or any(k.arg is None for k in call.keywords) or \
                any(k.arg == "sync_batchnorm" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in call.keywords) or not _several_gpus(mod, call):
            continue
        if any(_bn_model(mod, m) for m in _fitted(mod, call)):
            ctx.emit("PT008", call, "Lightning trains a BatchNorm model on several GPUs (DDP) without "
                                    "sync_batchnorm=True: statistics come from each GPU's own batch; pass "
                                    "`sync_batchnorm=True` to the Trainer")
            return


def _number(mod, node) -> int | None:
    """An int, a ``"0,1"`` device string or a list's length, through one name binding."""
    for v in [node] + (mod.values_of(node)[:1] if isinstance(node, (ast.Name, ast.Attribute)) else []):
        if isinstance(v, ast.Constant) and isinstance(v.value, int) and not isinstance(v.value, bool):
            return v.value
        if isinstance(v, ast.Constant) and isinstance(v.value, str) and "," in v.value:
            return len([x for x in v.value.split(",") if x.strip()])
        if isinstance(v, (ast.List, ast.Tuple)):
            return len(v.elts)
    return None


def _several_gpus(mod, call: ast.Call) -> bool:
    """The Trainer runs DDP over several processes: a DDP strategy named, or several devices or nodes (Lightning
    then picks DDP), and no DataParallel (``"dp"``) or single-device mode named."""
    modes = [kwarg(call, k) for k in _MODE_KWARGS]
    texts = [m.value.lower() for m in modes if isinstance(m, ast.Constant) and isinstance(m.value, str)]
    if any(t in ("dp", "single_device", "cpu") for t in texts):
        return False
    if any("ddp" in t for t in texts) or any(isinstance(m, ast.Call) and "DDP" in (mod.qualname(m.func) or "")
                                              for m in modes):
        return True
    counts = [_number(mod, kwarg(call, k)) for k in _GPU_KWARGS if kwarg(call, k) is not None]
    return any(n is not None and (n > 1 or n == -1) for n in counts)


def _fitted(mod, trainer: ast.Call) -> list[ast.expr]:
    """The models that ``X.fit(model, ...)`` trains, ``X`` bound to ``trainer``."""
    out = []
    for call, _ in mod.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "fit" and (call.args or kwarg(call, "model") is not None) and \
                any(v is trainer for v in mod.values_of(f.value)):
            out.append(call.args[0] if call.args else kwarg(call, "model"))
    return out


def _bn_model(mod, node: ast.expr) -> bool:
    """``node`` is a BatchNorm model: built from a torchvision/timm BatchNorm architecture (through names, or
    handed to the constructor of the LightningModule fitted), or an instance of a class of this file whose body
    has ``nn.BatchNorm*`` layers or builds such an architecture."""
    builds = {id(b) for b in bn_models.library_bn_model_calls(mod)}
    if bn_models.comes_from(mod, node, builds):
        return True
    for v in [node] + mod.values_of(node)[:2]:
        if not isinstance(v, ast.Call):
            continue
        cls = mod.local_class(v.func)
        if cls is not None and not mod.is_foreign(cls) and any(
                isinstance(n, ast.Call) and (id(n) in builds or mod.qualname(n.func) in _BN_LAYERS)
                for n in ast.walk(cls)):
            return True
        if cls is not None and any(bn_models.comes_from(mod, a, builds) for a in
                                   list(v.args) + [k.value for k in v.keywords]):
            return True
    return False
