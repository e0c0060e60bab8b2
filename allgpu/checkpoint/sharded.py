"""Sharded checkpoints on ``torch.distributed.checkpoint`` (DCP): every rank writes part of the tensors.

Mirrored state is identical on every replica, so DCP's default save planner de-duplicates it and spreads
the writes over the ranks (``dedup_save_plans``: each tensor goes to the rank with the least planned
bytes), instead of gathering everything on rank 0. Layout of ``ckpt-<step>/``::

    __<rank>_<n>.distcp   tensor data written by each rank (DCP)
    .metadata             DCP's index (rank 0)
    MANIFEST              allgpu's, written last by rank 0: size and sha256 of every file above, the
                          optimizer's non-tensor state, epoch, step, data and RNG states

The folder is written under a hidden temp name and renamed once ``MANIFEST`` is durable, so a crash
leaves nothing that ``latest_checkpoint`` takes. Loading reads every tensor on every rank (each replica
needs the full mirrored state) with ``no_dist=True``, so any number of replicas can restore it.

Trust: ``MANIFEST`` is read with ``torch.load(weights_only=True)``, but DCP itself unpickles its
``.metadata`` file; allgpu checks that file's sha256 against ``MANIFEST`` first, which catches corruption,
not a deliberate forgery. Load sharded checkpoints only from sources you trust, as with DCP.
"""

from __future__ import annotations

import os
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from allgpu.checkpoint import collective, sharded_model
from allgpu.checkpoint.format import (
    TEMP_PREFIX,
    fsync_dir,
    read_file,
    sha256_of,
    write_file,
)
from allgpu.checkpoint.state import load_model, load_optimizer, param_names
from allgpu.checkpoint.store import MANIFEST
from allgpu.errors import CheckpointError


def split_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> tuple[dict, dict | None]:
    """Optimizer state keyed by parameter name: ``(tensors, meta)``.

    ``tensors[name][key]`` are the state tensors (for DCP); ``meta`` holds ``param_groups`` with names in
    place of ids, non-tensor state values, and each tensor's shape and dtype (to allocate them on load).
    """
    if optimizer is None:
        return {}, None
    names = param_names(model, optimizer)
    saved = optimizer.state_dict()
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    scalars: dict[str, dict[str, Any]] = {}
    layout: dict[str, dict[str, tuple[list[int], str]]] = {}
    for pid, values in saved["state"].items():
        name = names[pid]
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors.setdefault(name, {})[key] = value
                layout.setdefault(name, {})[key] = (list(value.shape), str(value.dtype).removeprefix("torch."))
            else:
                scalars.setdefault(name, {})[key] = value
    groups = [dict(g, params=[names[pid] for pid in g["params"]]) for g in saved["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars, "layout": layout}


def save(final: Path, *, tensors: dict, meta: dict, group: Any = None) -> None:
    """Write ``tensors`` (``{"model": ..., "optim": ...}``) with DCP and ``meta`` into ``MANIFEST``.

    Every rank of ``group`` calls this. Returns on every rank once ``final`` is complete.

    Raises:
        OSError: writing failed (the temp folder is left for ``prune`` to remove).
    """
    final = Path(final)
    tmp = final.parent / collective.broadcast(f"{TEMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}", group)
    rank = collective.rank(group)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process.*")
        import torch.distributed.checkpoint as dcp  # here, not at the top: see sharded_model.py

        collective.run(f"dcp.save({final.name})", lambda: dcp.save(
            tensors,
            storage_writer=dcp.FileSystemWriter(tmp, sync_files=True, overwrite=False),
            process_group=group,
            no_dist=not collective.initialized(),
        ), group)
    # Each rank hashes what it wrote itself, so verification data is made without reading it all on rank 0.
    mine = {
        p.name: (p.stat().st_size, sha256_of(p))
        for p in sorted(tmp.iterdir())
        if p.name.startswith(f"__{rank}_") or (rank == 0 and p.name == ".metadata")
    }
    per_rank = collective.all_gather(mine, group)
    error = None
    if rank == 0:
        try:
            files: dict[str, tuple[int, str]] = {}
            for part in per_rank:
                files.update(part)
            write_file(tmp / MANIFEST, dict(meta, files=files))
            fsync_dir(tmp)
            _replace_folder(tmp, final)
        except Exception as exc:  # reported to every replica by agree(), never a hang in a barrier
            error = exc
    collective.agree(error, f"finishing sharded checkpoint {final}", group)


def _replace_folder(tmp: Path, final: Path) -> None:
    if final.exists():  # saving the same step again: move the old one aside first (rename cannot overwrite)
        trash = final.parent / f"{TEMP_PREFIX}{final.name}-old-{uuid.uuid4().hex[:8]}"
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(final.parent)


def _empty(shape: list[int], dtype: str) -> torch.Tensor:
    return torch.empty(shape, dtype=getattr(torch, dtype))


def load(
    path: Path, *, model: nn.Module, optimizer: torch.optim.Optimizer | None, strict: bool
) -> dict:
    """Load a verified sharded checkpoint into ``model`` / ``optimizer``; return its manifest.

    Raises:
        CheckpointError: the model or optimizer does not fit the checkpoint.
    """
    path = Path(path)
    manifest = read_file(path / MANIFEST)
    if sharded_model.is_fully_sharded(model):  # each replica reads only its own rows
        sharded_model.load(path, manifest, model=model, optimizer=optimizer, strict=strict)
        return manifest
    shapes = manifest["model_shapes"]
    wanted = set(model.state_dict().keys())
    keys = [k for k in shapes if strict or k in wanted]
    target: dict[str, Any] = {"model": {k: _empty(*shapes[k]) for k in keys}}
    optim_meta = manifest["optimizer"]
    if optimizer is not None and optim_meta is None:
        raise CheckpointError(
            f"checkpoint {path} holds no optimizer state, but an optimizer was passed to restore(). "
            "Fix: restore without optimizer=, or save with optimizer= next time."
        )
    if optimizer is not None:
        target["optim"] = {
            name: {key: _empty(*spec) for key, spec in entries.items()}
            for name, entries in optim_meta["layout"].items()
        }
    with warnings.catch_warnings():  # no_dist is deliberate: each replica reads the full mirrored state
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
        import torch.distributed.checkpoint as dcp  # here, not at the top: see sharded_model.py

        dcp.load(target, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    load_model(model, target["model"], strict=strict, source=path)
    if optimizer is not None:
        load_optimizer(optimizer, _optimizer_state(model, optimizer, optim_meta, target["optim"], path), source=path)
    return manifest


def _optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict, tensors: dict, path: Path
) -> dict:
    """Rebuild ``optimizer.state_dict()`` form (integer ids) from the name-keyed saved state."""
    ids = {name: i for i, name in enumerate(param_names(model, optimizer))}
    unknown = [n for g in meta["param_groups"] for n in g["params"] if n not in ids]
    if unknown:
        raise CheckpointError(
            f"checkpoint {path}: the saved optimizer updates {unknown[:5]}, which the current optimizer "
            "does not hold. Fix: build the optimizer over the same parameters as when saved."
        )
    state: dict[int, dict[str, Any]] = {}
    for name in set(meta["scalars"]) | set(tensors):
        state[ids[name]] = {**meta["scalars"].get(name, {}), **tensors.get(name, {})}
    groups = [dict(g, params=[ids[n] for n in g["params"]]) for g in meta["param_groups"]]
    return {"state": state, "param_groups": groups}
