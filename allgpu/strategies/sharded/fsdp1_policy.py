"""FSDP1's ``auto_wrap_policy`` given as ``shard_modules=``: the units FSDP1 would have wrapped.

pytorch/tutorials' FSDP tutorial (and most FSDP1 scripts) pass ``FSDP(model, auto_wrap_policy=policy)`` a
``functools.partial(size_based_auto_wrap_policy, min_num_params=...)`` or ``transformer_auto_wrap_policy``, a
function of ``(module, recurse, nonwrapped_numel)``; or a ``ModuleWrapPolicy`` / ``CustomPolicy`` object. Passed to
``FullyShardedStrategy(shard_modules=...)`` as a predicate, they stopped the job with a bare ``TypeError: ...
missing 2 required positional arguments: 'recurse' and 'nonwrapped_numel'``. Here they choose the same modules
FSDP1 wraps: a policy function by FSDP1's own bottom-up walk (``torch.distributed.fsdp.wrap._recursive_wrap``: ask
with ``recurse=True`` whether to descend, then, children done, with ``recurse=False`` and the parameter count the
children did not take whether to wrap the module); a policy object through its ``_run_policy`` (the method FSDP1
calls; private, so a torch upgrade may change it). Per-module settings a ``CustomPolicy`` returns are ignored.
"""

from __future__ import annotations

import inspect

from torch import nn


def is_fsdp1_policy(shard_modules) -> bool:
    """True for an FSDP1 ``auto_wrap_policy``: a policy object, or a callable taking ``recurse``."""
    if callable(getattr(shard_modules, "_run_policy", None)):
        return True
    if not callable(shard_modules) or isinstance(shard_modules, type):
        return False
    try:
        return "recurse" in inspect.signature(shard_modules).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def fsdp1_units(root: nn.Module, policy) -> set[nn.Module]:
    """The modules under ``root`` FSDP1 would wrap with ``policy`` (``root`` itself left out: always a unit)."""
    if callable(getattr(policy, "_run_policy", None)):
        chosen = set(policy._run_policy(root, set(), {}))
    else:
        chosen = set()
        _walk(root, policy, chosen)
    chosen.discard(root)
    return chosen


def _walk(module: nn.Module, policy, chosen: set) -> int:
    """FSDP1's ``_recursive_wrap`` without wrapping: returns the parameter count taken by ``module``'s units."""
    total = sum(p.numel() for p in module.parameters())
    if not policy(module=module, recurse=True, nonwrapped_numel=total):
        return 0
    taken = sum(_walk(child, policy, chosen) for child in module.children())
    if policy(module=module, recurse=False, nonwrapped_numel=total - taken):
        chosen.add(module)
        return total
    return taken
