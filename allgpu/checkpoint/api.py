"""``save`` / ``restore`` / ``latest_checkpoint`` / ``restore_rng``: the public entry points.

Every replica calls ``save`` and ``restore`` (SPMD). State is mirrored, so for a single-file checkpoint
replica 0 writes and every replica reads; a job with a different number of replicas restores the same
model and optimizer. Follows PyTorch's own recipe (``torch.save`` of ``state_dict()``s, loaded with
``weights_only=True``) plus a checksum, atomic rename and the RNG / data-position state exact resume needs.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import allgpu
from allgpu.checkpoint import collective, sharded, sharded_model, store, tf_layout
from allgpu.checkpoint.format import CorruptCheckpointError, read_file, write_file
from allgpu.checkpoint.preflight import directory_error, warn_open_accumulation
from allgpu.checkpoint.pending import PendingCheckpoint, track, wait_pending
from allgpu.checkpoint.state import (
    CheckpointState,
    StagingBuffers,
    apply_rng,
    capture_rng,
    check_plain,
    cpu_copy,
    load_model,
    load_optimizer,
    param_names,
)
from allgpu.errors import ArgumentError, ArgumentTypeError, CheckpointError, warn_user
from allgpu.runtime.live import check_supported, mirror_pending
from allgpu.runtime.interrupt import note_checkpoints

FORMAT = 1
# id of the default group -> (that group, the Gloo group for its background sharded writes)
_ASYNC_GROUPS: dict[int, tuple[Any, Any]] = {}
_STAGING = StagingBuffers()  # reused by every background save of this process


@atexit.register
def _release_async_groups() -> None:
    """Drop the background-write groups while the interpreter still runs: a Gloo group left to the interpreter's
    final teardown can be destroyed with its worker threads still joinable (``terminate called without an active
    exception``, SIGABRT after the script ended, 1 run in 8 on 4 CPU replicas)."""
    _ASYNC_GROUPS.clear()


def _validate(directory, model, optimizer, epoch, step, data_state, extra, keep) -> Path:
    mirror_pending()  # saving inside an open scope() saves mirrored (or sharded) state
    if not isinstance(directory, (str, os.PathLike)):
        raise ArgumentTypeError(f"save(directory={directory!r}): expected a str or os.PathLike directory path")
    if not isinstance(model, nn.Module):
        raise ArgumentTypeError(f"save(model=...) got a {type(model).__name__}; expected a torch.nn.Module")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentTypeError(f"save(optimizer=...) got a {type(optimizer).__name__}; expected a torch.optim.Optimizer")
    for name, value in (("epoch", epoch), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ArgumentError(f"save({name}={value!r}): expected an int >= 0")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ArgumentError(f"save(keep={keep!r}): expected an int >= 1, or None to keep every checkpoint")
    if data_state is not None and not isinstance(data_state, dict):
        raise ArgumentTypeError(f"save(data_state=...) got a {type(data_state).__name__}; expected a dict or None")
    check_plain(data_state, "save(data_state=...)")
    check_plain(extra, "save(extra=...)")
    if optimizer is not None:  # an exotic hyper-parameter object would only fail at restore time
        check_plain(optimizer.state_dict()["param_groups"], "optimizer.state_dict()['param_groups']")
    note_checkpoints(lambda: newest_on_disk(directory))  # from now on an interrupt names the newest one
    warn_open_accumulation("checkpoint.save", collective.rank())
    return Path(directory)


def save(
    directory: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    epoch: int = 0,
    step: int = 0,
    *,
    data_state: dict | None = None,
    rng: bool = True,
    extra: Any = None,
    keep: int | None = 3,
    sharded: bool = False,
    blocking: bool = True,
) -> Path | PendingCheckpoint:
    """Write ``<directory>/ckpt-<step:09d>.pt`` (or the folder ``ckpt-<step:09d>/`` with ``sharded=True``).

    Every replica calls it. Single file: replica 0 writes, atomically (temp file, fsync, ``os.replace``);
    sharded: every replica writes a share through ``torch.distributed.checkpoint`` into a temp folder that
    is renamed when complete. With ``blocking=True`` all replicas return once the checkpoint is final.

    Args:
        model / optimizer: saved as ``state_dict()``s (tensors copied to CPU).
        epoch / step: ints >= 0; ``step`` names the checkpoint, so the newest step is the latest.
        data_state: the sampler's dict (epoch, position, seed), handed back by ``restore``.
        rng: also store torch / numpy / ``random`` (and CUDA) RNG states of every replica.
        extra: anything made of tensors, str, int, float, bool, None, lists, tuples and dicts.
        keep: keep the newest ``keep`` checkpoints that verify and delete older ones; None keeps all.
        sharded: write the folder form; always so for a fully sharded (FSDP) model, whose state is never
            gathered on one replica.
        blocking: False copies the state to CPU memory (the only pause) and writes on a background
            thread; the call then returns a ``PendingCheckpoint`` (``.wait()`` gives the path), and
            ``wait_pending()`` waits for all. Without a barrier: other replicas do not wait for the file.

    Returns:
        The checkpoint path (``blocking=True``), or a ``PendingCheckpoint``.

    Raises:
        TypeError / ValueError: bad arguments, naming which.
        CheckpointError: ``data_state`` or ``extra`` holds something ``weights_only`` loading refuses,
            or a previous background write failed.
        CheckpointError: the directory is a file or cannot be written (from the OSError, naming it).
    """
    check_supported("checkpoint")
    directory = _validate(directory, model, optimizer, epoch, step, data_state, extra, keep)
    wait_pending()  # one write in flight at a time, so checkpoints land in step order
    started = time.perf_counter()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise directory_error(directory, exc) from exc
    meta = {
        "format": FORMAT,
        "allgpu_version": allgpu.__version__,
        "torch_version": str(torch.__version__),  # TorchVersion is not weights_only-safe
        "epoch": epoch,
        "step": step,
        "data_state": data_state,
        "rng_states": collective.all_gather(capture_rng()) if rng else None,
        "extra": extra,
        "world_size": collective.world_size(),
    }
    if sharded or sharded_model.is_fully_sharded(model):
        return _save_sharded(directory, model, optimizer, meta, keep, blocking, started)
    final = directory / store.file_name(step)
    job = None
    if collective.rank() == 0:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
        }
        if blocking:
            state = cpu_copy(state, clone=False)
        else:
            state = _STAGING.copy(state, ("single",))
            _STAGING.synchronize()
        payload = dict(meta, **state)

        def job() -> None:
            store.set_aside_if_corrupt(final)  # a corrupt file of the same step is moved, not overwritten
            write_file(final, payload)
            store.VERIFIED.add(final)
            store.prune(directory, keep, protect=final)

    if blocking:
        error = _run_write(job, directory)
        collective.agree(error, f"writing checkpoint {final}")
        return final
    return track(PendingCheckpoint(final, job, time.perf_counter() - started))


def _run_write(job, directory: Path) -> BaseException | None:
    """Run the write job (replica 0's; None elsewhere); return its error, to be reported to every replica by
    ``agree`` (never a hang in a barrier). Disk full, permissions: a CheckpointError naming the folder."""
    if job is None:
        return None
    try:
        job()
    except OSError as exc:
        error = directory_error(directory, exc)
        error.__cause__ = exc
        return error
    except Exception as exc:
        return exc
    return None


def _save_sharded(directory, model, optimizer, meta, keep, blocking, started) -> Path | PendingCheckpoint:
    final = directory / store.folder_name(meta["step"])
    if sharded_model.is_fully_sharded(model):
        model_state, optim_tensors, optim_meta = sharded_model.split(model, optimizer)
    else:
        optim_tensors, optim_meta = sharded.split_optimizer(model, optimizer)
        model_state = model.state_dict()
    meta = dict(
        meta,
        kind="sharded",
        model_shapes={k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in model_state.items()},
        optimizer=optim_meta,
    )
    tensors = {"model": model_state, "optim": optim_tensors}
    group = None
    if not blocking:
        tensors = _STAGING.copy(tensors, ("sharded",))
        _STAGING.synchronize()
        group = _async_group()

    def job() -> None:
        sharded.save(final, tensors=tensors, meta=meta, group=group)
        if collective.rank(group) == 0:
            store.VERIFIED.add(final)
            store.prune(directory, keep, protect=final)

    if blocking:
        job()
        return final
    return track(PendingCheckpoint(final, job, time.perf_counter() - started))


def _async_group() -> Any:
    """A Gloo group of all ranks for background writes, so their collectives never meet training's."""
    if not collective.initialized():
        return None
    world = dist.group.WORLD
    cached = _ASYNC_GROUPS.get(id(world))
    if cached is None or cached[0] is not world:  # a new default group (the old one destroyed) gets its own
        cached = _ASYNC_GROUPS[id(world)] = (world, dist.new_group(backend="gloo"))
    return cached[1]


def newest_on_disk(directory: str | os.PathLike) -> Path | None:
    """Newest checkpoint in ``directory`` by name, without verifying it (cheap: a listing). Files and folders get
    their final names only once complete, so it is whole unless the disk corrupted it; None if there is none."""
    found = store.entries(Path(directory))
    return found[0].path if found else None


def latest_checkpoint(directory: str | os.PathLike) -> Path | str | None:
    """Newest checkpoint in ``directory`` whose checksum verifies, or None (also for a missing directory).

    A newer checkpoint that fails verification (truncated, bit-flipped, unfinished) is skipped with a
    ``warnings.warn`` naming it and why. A directory in TensorFlow's layout (a ``checkpoint`` state file, as
    written by :class:`allgpu.checkpoint.Checkpoint` / ``CheckpointManager`` or by TensorFlow) gives the newest
    ``prefix-N`` as a str, as ``tf.train.latest_checkpoint`` does; allgpu's own layout gives a ``Path``.

    Raises:
        CheckpointError: ``directory`` is a file.
    """
    if (Path(directory) / tf_layout.STATE_FILE).is_file():
        return tf_layout.latest(directory)
    return store.latest(Path(directory))


def restore(
    path_or_directory: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    map_location: Any = "cpu",
    strict: bool = True,
) -> CheckpointState:
    """Load a checkpoint into ``model`` (and ``optimizer``) in place; return the rest as a ``CheckpointState``.

    Every replica may call it (each reads the file; no collective is used), except for a fully sharded (FSDP)
    model, where every replica must call it (each reads its own shard), and inside an open ``scope()`` whose
    modules are not yet mirrored (the restore is their first use: every replica calls it). Given a directory, the newest
    checkpoint that verifies is used: a corrupt newer one is skipped with a warning naming it and why.
    Given a checkpoint file or folder, exactly that one is used. The number of replicas may differ from
    the saving job's. Loading uses ``torch.load(weights_only=True)``.

    Args:
        map_location: where a single-file payload's tensors are loaded before being copied into the model
            (``torch.load`` semantics); sharded checkpoints stage on CPU.
        strict: as in ``nn.Module.load_state_dict``.

    Raises:
        CheckpointError: nothing valid exists at the path, the explicit checkpoint is corrupt, or the model
            / optimizer does not fit (naming missing and unexpected keys and the fix).
    """
    check_supported("checkpoint")
    mirror_pending()  # restoring inside an open scope() restores into mirrored (or sharded) state
    if not isinstance(model, nn.Module):
        raise ArgumentTypeError(f"restore(model=...) got a {type(model).__name__}; expected a torch.nn.Module")
    path = Path(path_or_directory)
    if not path.exists():
        raise CheckpointError(
            f"no checkpoint at {path}: it does not exist. Fix: pass the directory given to save(), "
            "or check latest_checkpoint(directory) first (None means start from scratch)."
        )
    if store.is_checkpoint(path):
        try:
            return _load(path, model, optimizer, map_location, strict)
        except CorruptCheckpointError as exc:
            raise CheckpointError(f"cannot restore {path}: {exc}") from exc
    problems = []
    for entry in store.entries(path):
        try:
            return _load(entry.path, model, optimizer, map_location, strict)
        except CorruptCheckpointError as exc:
            problems.append(str(exc))
            warn_user(f"allgpu: skipping checkpoint {exc}. Falling back to the previous one.")
    found = f"all {len(problems)} found are corrupt ({'; '.join(problems)})" if problems else "it holds none"
    raise CheckpointError(
        f"no valid checkpoint in {path}: {found}. Expected files named ckpt-<step>.pt or folders "
        "ckpt-<step>/ written by allgpu.checkpoint.save. Fix: point restore() at the directory passed "
        "to save(), or start from scratch."
    )


def _load(path: Path, model, optimizer, map_location, strict) -> CheckpointState:
    if path.is_dir():
        store.verify(path)
        meta = sharded.load(path, model=model, optimizer=optimizer, strict=strict)
    else:
        meta = read_file(path, map_location=map_location)
        if not isinstance(meta, dict) or "model" not in meta or meta.get("format") != FORMAT:
            raise CorruptCheckpointError(f"{path}: verifies but is not an allgpu format-{FORMAT} checkpoint")
        if sharded_model.is_fully_sharded(model):
            _load_full_into_sharded(path, model, optimizer, meta, strict)
            return _state(path, meta)
        load_model(model, meta["model"], strict=strict, source=path)
        if optimizer is not None:
            if meta["optimizer"] is None:
                raise CheckpointError(
                    f"checkpoint {path} holds no optimizer state, but an optimizer was passed to restore(). "
                    "Fix: restore without optimizer=, or save with optimizer= next time."
                )
            load_optimizer(optimizer, meta["optimizer"], source=path)
    return _state(path, meta)


def _load_full_into_sharded(path: Path, model, optimizer, meta: dict, strict: bool) -> None:
    if optimizer is not None and meta["optimizer"] is None:
        raise CheckpointError(f"checkpoint {path} holds no optimizer state, but an optimizer was passed to restore(). "
                              "Fix: restore without optimizer=, or save with optimizer= next time.")
    names = param_names(model, optimizer) if optimizer is not None else []
    try:
        sharded_model.load_full(model, optimizer, meta["model"], meta["optimizer"], names, strict=strict)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit the model or optimizer: {exc}. Fix: build them "
                              "exactly as when saved.") from exc


def _state(path: Path, meta: dict) -> CheckpointState:
    return CheckpointState(
        path=path,
        epoch=meta["epoch"],
        step=meta["step"],
        data_state=meta["data_state"],
        rng_states=meta["rng_states"],
        extra=meta["extra"],
        world_size_at_save=meta["world_size"],
    )


def restore_rng(state: CheckpointState, rank: int) -> None:
    """Set torch / numpy / ``random`` (and CUDA) RNG states to those replica ``rank`` had when saving.

    Nothing happens when the checkpoint was saved with ``rng=False``; a rank the saving job did not have
    (resuming with more replicas) keeps its current RNG state, with a warning.

    Raises:
        ValueError: ``rank`` is not an int >= 0.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ArgumentError(f"restore_rng(rank={rank!r}): expected an int >= 0")
    if state.rng_states is None:
        return
    if rank >= len(state.rng_states):
        warn_user(
            f"allgpu: checkpoint {state.path} has RNG states for {len(state.rng_states)} replicas, none for "
            f"rank {rank}; its RNGs keep their current state (resume is exact only for data order).")
        return
    apply_rng(state.rng_states[rank])
