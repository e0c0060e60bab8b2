"""Notes for the tracebacks of scripts ported from DistributedDataParallel.

A DDP script reaches its model through the wrapper: ``model.module.state_dict()``, ``model.module.config``,
``torch.save(model.module, f)``. allgpu mirrors the user's own module in place (no wrapper), so a port that keeps
``.module`` stops with ``nn.Module``'s bare ``AttributeError: 'Net' object has no attribute 'module'``, which says
nothing of why. An alias (``model.module is model``) would make every mirrored model refer to itself (a cycle kept
until the garbage collector runs, and one more entry to keep out of ``state_dict`` and pickles), so the error
stays and gets a note naming the fix.
"""

from __future__ import annotations

import os
import re
import traceback

_MISSING_MODULE = re.compile(r"^'(?P<cls>\w+)' object has no attribute 'module'$")
_MODULE_PY = os.path.join("torch", "nn", "modules", "module.py")


def ddp_module_hint(exc: BaseException) -> str | None:
    """The note for ``nn.Module.__getattr__``'s "no attribute 'module'" (a DDP wrapper's attribute asked of a
    model allgpu mirrored in place); None for any other error. Local."""
    if not isinstance(exc, AttributeError) or not _MISSING_MODULE.match(str(exc)):
        return None
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames or not (frames[-1].filename.endswith(_MODULE_PY) and frames[-1].name == "__getattr__"):
        return None  # not raised by a torch module
    name = _MISSING_MODULE.match(str(exc))["cls"]
    return (f"allgpu: a model mirrored by allgpu is your own {name}, not a DistributedDataParallel wrapper, so it "
            f"has no `.module`. Fix: write `model` where the DDP script wrote `model.module` (e.g. "
            f"`model.state_dict()`; for a model FullyShardedStrategy sharded, `strategy.full_state_dict(model)`).")
