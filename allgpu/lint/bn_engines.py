"""PT008 for models an engine wraps in DDP: ``accelerator.prepare(model, ...)`` wraps each model in
DistributedDataParallel when Accelerate runs on several GPUs, so a BatchNorm model prepared that way normalises each
GPU's batch alone unless converted to SyncBatchNorm first (diffusers' AutoencoderKL training script, tuning half a0505:
its GAN discriminator). BatchNorm models: ``nn.BatchNorm*`` layers in the file, the torchvision/timm architectures of
:mod:`allgpu.lint.bn_models`, and the PatchGAN discriminator of taming-transformers (``NLayerDiscriminator``, built
with BatchNorm2d unless ``use_actnorm=True``)."""

from __future__ import annotations

import ast

from allgpu.lint import bn_models
from allgpu.lint.resolve import kwarg

_BN_LAYERS = ("torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d")
_PATCHGAN = ("taming.modules.losses.vqperceptual.NLayerDiscriminator",
             "taming.modules.discriminator.model.NLayerDiscriminator")


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
