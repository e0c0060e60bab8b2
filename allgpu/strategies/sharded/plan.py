"""Which submodules become their own FSDP unit (one all-gather and one reduce-scatter each).

FSDP2 (``torch.distributed.fsdp.fully_shard``) groups parameters per call: each call on a submodule makes one
communication group, applied bottom-up, and the root takes every parameter left. Per-unit groups let a replica
hold only one unit's gathered parameters at a time, which is where FSDP's peak-memory saving comes from.

Default plan: the outermost submodules whose class occurs more than once in the model (transformer blocks,
residual stages; for a plain MLP, its Linear layers), as PyTorch's own FSDP2 examples shard each
``TransformerBlock``; a container holding several composite blocks of one class (an ``nn.Sequential`` of
blocks) is looked into rather than taken whole, even when its class repeats elsewhere. A candidate is skipped when it shares a parameter (a tied weight) with a module outside it:
FSDP2 requires a shared parameter to belong to one group, their common ancestor's.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from torch import nn

from allgpu.errors import ArgumentTypeError, ShardingError
from allgpu.strategies.sharded.fsdp1_policy import fsdp1_units, is_fsdp1_policy

# Containers without a forward of their own: FSDP's forward hooks would never fire on them.
_NO_FORWARD = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


def validate_shard_modules(shard_modules) -> None:
    """Check ``shard_modules=``: None, a module class, a sequence of classes, or a predicate ``fn(module) -> bool``.

    Raises:
        TypeError: anything else, naming what was given and the accepted forms.
    """
    if shard_modules is None or _is_module_class(shard_modules):
        return
    if isinstance(shard_modules, (list, tuple, set, frozenset)):
        bad = [c for c in shard_modules if not _is_module_class(c)]
        if not bad and shard_modules:
            return
        what = f"an empty {type(shard_modules).__name__}" if not shard_modules else f"{bad[0]!r}"
        raise ArgumentTypeError(f"shard_modules got {what}; expected torch.nn.Module subclasses such as "
                        "shard_modules=[TransformerBlock].")
    if callable(shard_modules) or is_fsdp1_policy(shard_modules):
        return
    raise ArgumentTypeError(f"shard_modules={shard_modules!r}; expected None (each repeated submodule class), a Module class, "
                    "a list of Module classes, a predicate fn(module) -> bool, or an FSDP1 auto_wrap_policy.")


def _is_module_class(value) -> bool:
    return isinstance(value, type) and issubclass(value, nn.Module)


def _selector(shard_modules) -> Callable[[nn.Module], bool]:
    if _is_module_class(shard_modules):
        return lambda m: isinstance(m, shard_modules)
    if isinstance(shard_modules, (list, tuple, set, frozenset)):
        classes = tuple(shard_modules)
        return lambda m: isinstance(m, classes)
    return shard_modules


def _params(module: nn.Module) -> set[int]:
    return {id(p) for p in module.parameters()}


def _shares_outside(unit: nn.Module, root: nn.Module) -> bool:
    """True when a parameter of ``unit`` is also registered on a module outside ``unit``."""
    inside = {id(m) for m in unit.modules()}
    mine = _params(unit)
    for module in root.modules():
        if id(module) in inside:
            continue
        if any(id(p) in mine for p in module.parameters(recurse=False)):
            return True
    return False


def plan_units(root: nn.Module, shard_modules=None) -> list[nn.Module]:
    """Submodules of ``root`` to ``fully_shard`` before ``root`` itself, children before parents (bottom-up).

    Args:
        root: the model.
        shard_modules: None for the default plan (module docstring), Module classes, a predicate
            ``fn(module) -> bool`` (every matching submodule becomes a unit; nested matches are allowed), or an
            FSDP1 ``auto_wrap_policy`` (the modules FSDP1 would wrap: :mod:`allgpu.strategies.sharded.fsdp1_policy`).

    Raises:
        ShardingError: an explicitly chosen submodule shares a parameter with a module outside it.
    """
    if shard_modules is None:
        return _default_units(root)
    if is_fsdp1_policy(shard_modules):
        wrapped = fsdp1_units(root, shard_modules)
        choose = wrapped.__contains__
    else:
        choose = _selector(shard_modules)
    units = [m for m in root.modules() if m is not root and not isinstance(m, _NO_FORWARD) and choose(m)
             and any(True for _ in m.parameters())]
    for unit in units:
        if _shares_outside(unit, root):
            raise ShardingError(
                f"shard_modules selects a {type(unit).__name__} that shares a parameter (a tied weight) with a "
                "module outside it; FSDP needs a shared parameter in one unit. Fix: leave that module out of "
                "shard_modules (its parameters then go to the enclosing unit)."
            )
    return list(reversed(units))  # modules() is parents-first; fully_shard wants children first


def _default_units(root: nn.Module) -> list[nn.Module]:
    eligible = [m for m in root.modules() if m is not root and not isinstance(m, _NO_FORWARD)
                and any(True for _ in m.parameters())]
    counts = Counter(type(m) for m in eligible)
    units: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            if (not isinstance(child, _NO_FORWARD) and counts[type(child)] > 1 and not _stack(child)
                    and any(True for _ in child.parameters()) and not _shares_outside(child, root)):
                units.append(child)
            else:
                visit(child)

    visit(root)
    return units


def _stack(module: nn.Module) -> bool:
    """A container of repeated composite blocks (``nn.Sequential(*[Block() for _ in range(n)])``): its class may
    repeat elsewhere (the blocks' own ``nn.Sequential`` MLPs), but the blocks, not the stack, are the units."""
    composite = Counter(type(c) for c in module.children() if any(True for _ in c.children()))
    return any(n > 1 for n in composite.values())


def describe(units: Iterable[nn.Module]) -> str:
    """``"4 x Block, 1 x Linear"``: the plan in words, for logs and errors."""
    counts = Counter(type(u).__name__.removeprefix("FSDP") for u in units)
    return ", ".join(f"{n} x {name}" for name, n in counts.items()) or "the root module only"
