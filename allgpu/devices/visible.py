"""``CUDA_VISIBLE_DEVICES``: parse it the way CUDA does, map it onto the driver's GPUs, explain it.

The one implementation: :mod:`allgpu.devices`, ``allgpu doctor`` and the step monitor's NVML sampler use it.

The rules follow the CUDA Programming Guide ("CUDA Environment Variables") as PyTorch re-implements them in
``torch.cuda._parse_visible_devices`` and ``torch.cuda._transform_uuid_to_ordinals`` (PyTorch 2.x):

* unset: every GPU is visible; empty (``""``): none is.
* a comma-separated list of indices (``"0,2"``), of ``GPU-`` UUIDs or unique UUID prefixes, or of ``MIG-`` UUIDs;
  the form is decided by the first entry.
* each index entry is read like ``strtoul``: ``"1gpu"`` counts as ``1``; a negative or non-numeric entry
  (``"-1"``, ``"a"``, ``""``) ends the list and everything after it is ignored.
* an index past the last GPU, or a UUID that matches no GPU (or several), also ends the list.
* a repeated entry makes the whole list empty: CUDA then shows no GPU at all.

``cuda:i`` is the ``i``-th accepted entry. Indices count in ``CUDA_DEVICE_ORDER`` (default ``FASTEST_FIRST``),
while ``nvidia-smi`` and NVML count in PCI bus order; the two agree unless the GPUs are of different models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from allgpu.errors import DeviceError

FORMS = ("unset", "empty", "index", "gpu-uuid", "mig-uuid")


class DriverGpu(Protocol):
    """What the mapping needs to know of one GPU the driver lists (``allgpu.doctor``'s ``GpuReading`` has it)."""

    index: int  # driver (NVML / nvidia-smi) index
    uuid: str  # "GPU-..."
    mig_devices: Sequence[str]  # "MIG-..." UUIDs of its MIG instances


@dataclass(frozen=True)
class VisibleDevices:
    """``CUDA_VISIBLE_DEVICES`` parsed, before looking at the GPUs.

    Attributes:
        raw: the variable's value, None when unset.
        form: one of ``FORMS``.
        accepted: entries CUDA honours, in order (``cuda:i`` is ``accepted[i]``), before range/UUID checks.
        stopper: the entry that ended the list early (``"-1"``, ``"a"``, ``""``), None when none did.
        dropped: entries after the stopper, which CUDA ignores.
        duplicate: an entry given twice; when set, CUDA shows no GPU at all.
        lenient: index entries read with trailing junk (``"1gpu"`` read as ``1``).
    """

    raw: str | None
    form: str
    accepted: tuple[str, ...] = ()
    stopper: str | None = None
    dropped: tuple[str, ...] = ()
    duplicate: str | None = None
    lenient: tuple[str, ...] = ()

    @property
    def effective(self) -> tuple[str, ...]:
        """Entries that select a GPU: ``accepted``, or none when an entry is repeated."""
        return () if self.duplicate is not None else self.accepted

    @property
    def malformed(self) -> bool:
        """True when the value is most likely a mistake: entries silently dropped, repeated or misread.

        A lone or trailing ``-1`` (the usual "hide every GPU" idiom) or a trailing comma is not malformed.
        """
        return bool(self.dropped or self.duplicate or self.lenient) or (
            self.stopper is not None and not _is_negative_int(self.stopper) and self.stopper != ""
        )


@dataclass(frozen=True)
class VisibleMapping:
    """Which driver GPUs PyTorch gets.

    Attributes:
        torch_to_driver: driver index of ``cuda:i`` for each torch index ``i`` (for a MIG instance, its GPU).
        hidden: driver indices PyTorch does not see.
        unresolved: the entry that did not match a GPU and ended the list, None when all matched.
        unresolved_reason: why it did not match.
        from_torch: True when read from the UUIDs torch reported, False when predicted from the variable.
    """

    torch_to_driver: tuple[int, ...]
    hidden: tuple[int, ...]
    unresolved: str | None = None
    unresolved_reason: str | None = None
    from_torch: bool = False


def _is_negative_int(entry: str) -> bool:
    return entry.startswith("-") and entry[1:].isdigit()


def _strtoul(entry: str) -> tuple[int, bool]:
    """``(value, exact)``: the leading integer (-1 when none) and whether nothing followed it."""
    digits = ""
    for i, c in enumerate(entry):
        if c.isdigit() or (i == 0 and c in "+-"):
            digits += c
        else:
            break
    try:
        value = int(digits)
    except ValueError:
        return -1, False
    return value, len(digits) == len(entry)


def parse_visible_devices(raw: str | None) -> VisibleDevices:
    """Parse a ``CUDA_VISIBLE_DEVICES`` value as CUDA does (see the module docstring). Never raises."""
    if raw is None:
        return VisibleDevices(raw=None, form="unset")
    if raw.strip() == "":
        return VisibleDevices(raw=raw, form="empty")
    entries = raw.split(",")
    if raw.startswith(("GPU-", "MIG-")):
        prefix = raw[:4]
        form = "gpu-uuid" if prefix == "GPU-" else "mig-uuid"
        accepted: list[str] = []
        for i, entry in enumerate(entries):
            if entry in accepted:
                return VisibleDevices(raw, form, tuple(accepted), duplicate=entry)
            if not entry.startswith(prefix):
                return VisibleDevices(raw, form, tuple(accepted), stopper=entry, dropped=tuple(entries[i + 1 :]))
            accepted.append(entry)
        return VisibleDevices(raw, form, tuple(accepted))
    values: list[int] = []
    lenient: list[str] = []
    for i, entry in enumerate(entries):
        value, exact = _strtoul(entry.strip())
        if value >= 0 and value in values:
            return VisibleDevices(raw, "index", tuple(map(str, values)), duplicate=str(value),
                                  lenient=tuple(lenient))
        if value < 0:
            return VisibleDevices(raw, "index", tuple(map(str, values)), stopper=entry.strip(),
                                  dropped=tuple(e.strip() for e in entries[i + 1 :]), lenient=tuple(lenient))
        if not exact:
            lenient.append(entry.strip())
        values.append(value)
    return VisibleDevices(raw, "index", tuple(map(str, values)), lenient=tuple(lenient))


def _norm_uuid(uuid: str) -> str:
    return uuid.lower().removeprefix("gpu-").removeprefix("mig-")


def _match(entry: str, gpus: Sequence[DriverGpu]) -> tuple[int | None, str | None]:
    """Driver index an entry selects, or ``(None, reason)``."""
    if entry.startswith("MIG-"):
        # Old drivers: MIG-GPU-<gpu uuid>/<gi>/<ci>; new drivers: MIG-<instance uuid>.
        if entry.startswith("MIG-GPU-"):
            parent = entry[len("MIG-"):].split("/")[0]
            hits = [g.index for g in gpus if g.uuid == parent]
        else:
            hits = [g.index for g in gpus if entry in g.mig_devices]
        if len(hits) == 1:
            return hits[0], None
        return None, f"{entry} is not a MIG instance of any GPU the driver lists"
    if entry.startswith("GPU-"):
        hits = [g.index for g in gpus if g.uuid.startswith(entry)]
        if len(hits) == 1:
            return hits[0], None
        if not hits:
            return None, f"{entry} matches no GPU the driver lists"
        return None, f"{entry} is ambiguous: it is a prefix of the UUIDs of GPUs {hits}"
    index = int(entry)
    if index < len(gpus):
        return index, None
    have = "no GPU" if not gpus else "GPU 0 only" if len(gpus) == 1 else f"GPUs 0..{len(gpus) - 1}"
    return None, f"index {index} is past the last GPU (the driver sees {have})"


def map_to_driver(
    visible: VisibleDevices,
    gpus: Sequence[DriverGpu],
    torch_uuids: Sequence[str | None] = (),
) -> VisibleMapping:
    """Map torch indices onto driver indices.

    When ``torch_uuids`` (one per torch device, from ``torch.cuda.get_device_properties(i).uuid``) are all
    known, the mapping is read from them; otherwise it is predicted from ``visible``, with indices taken in
    PCI bus order (see the module docstring for when that is wrong).

    Args:
        visible: the parsed variable.
        gpus: the driver's GPUs, driver order.
        torch_uuids: UUIDs torch reported, with or without the ``GPU-``/``MIG-`` prefix.
    """
    everyone = tuple(g.index for g in gpus)
    if torch_uuids and all(torch_uuids):
        by_uuid = {_norm_uuid(g.uuid): g.index for g in gpus}
        by_uuid.update({_norm_uuid(m): g.index for g in gpus for m in g.mig_devices})
        mapped = [by_uuid.get(_norm_uuid(u)) for u in torch_uuids if u]
        if all(m is not None for m in mapped):
            chosen = tuple(m for m in mapped if m is not None)
            return VisibleMapping(chosen, tuple(i for i in everyone if i not in chosen), from_torch=True)
    if visible.form == "unset":
        return VisibleMapping(everyone, ())
    chosen_list: list[int] = []
    for entry in visible.effective:
        index, reason = _match(entry, gpus)
        if index is None:
            return VisibleMapping(tuple(chosen_list), tuple(i for i in everyone if i not in chosen_list),
                                  unresolved=entry, unresolved_reason=reason)
        if index in chosen_list and visible.form != "mig-uuid":
            # Two UUID prefixes naming one GPU count as a repeat: CUDA then shows nothing.
            return VisibleMapping((), everyone, unresolved=entry,
                                  unresolved_reason=f"{entry} names GPU {index} a second time")
        chosen_list.append(index)
    chosen = tuple(chosen_list)
    return VisibleMapping(chosen, tuple(i for i in everyone if i not in chosen))


def explain(visible: VisibleDevices, mapping: VisibleMapping | None = None) -> str:
    """One or two plain sentences on what the variable does, e.g.
    ``"CUDA_VISIBLE_DEVICES=0: PyTorch sees 1 GPU (cuda:0 = GPU 0); GPUs 1, 2, 3 are hidden."``"""
    if visible.form == "unset":
        head = "CUDA_VISIBLE_DEVICES is unset: every GPU the driver sees is visible"
    elif visible.form == "empty":
        head = "CUDA_VISIBLE_DEVICES is set but empty: CUDA shows no GPU at all"
    else:
        head = f"CUDA_VISIBLE_DEVICES={visible.raw}"
    notes: list[str] = []
    if visible.duplicate is not None:
        notes.append(f"{visible.duplicate} is listed twice, so CUDA shows no GPU at all")
    if visible.stopper is not None:
        shown = repr(visible.stopper) if visible.stopper else "an empty entry"
        after = f"; {', '.join(repr(d) for d in visible.dropped)} after it ignored" if visible.dropped else ""
        if _is_negative_int(visible.stopper) and not visible.accepted and not visible.dropped:
            notes.append(f"{shown} hides every GPU")
        else:
            notes.append(f"the list ends at {shown}{after}")
    for entry in visible.lenient:
        notes.append(f"{entry!r} is read as {_strtoul(entry)[0]} (only its leading digits count; entries are "
                     "separated by commas)")
    if mapping is not None:
        if mapping.unresolved is not None:
            notes.append(f"{mapping.unresolved} selects no GPU, so the list ends there: {mapping.unresolved_reason}")
        n = len(mapping.torch_to_driver)
        if visible.form != "unset" or mapping.from_torch:
            what = "a MIG instance of GPU" if visible.form == "mig-uuid" else "GPU"
            pairs = ", ".join(f"cuda:{i} = {what} {d}" for i, d in enumerate(mapping.torch_to_driver))
            notes.append(f"PyTorch sees {n or 'no'} GPU{'s' if n > 1 else ''}" + (f" ({pairs})" if pairs else ""))
        if mapping.hidden:
            notes.append(f"GPU{'s' if len(mapping.hidden) > 1 else ''} "
                         f"{', '.join(map(str, mapping.hidden))} hidden")
    return head + (": " + "; ".join(notes) if notes and visible.form not in ("unset", "empty") else
                   ("; " + "; ".join(notes) if notes else "")) + "."


def nvml_selector(visible_index: int, raw: str | None) -> str | int:
    """What names the GPU behind ``cuda:visible_index`` to NVML when torch cannot report its UUID: the UUID from
    ``CUDA_VISIBLE_DEVICES=raw`` (for ``nvmlDeviceGetHandleByUUID``), else the driver index it lists (for
    ``nvmlDeviceGetHandleByIndex``), or ``visible_index`` itself when the variable is unset. Predicted from the
    variable alone, in PCI bus order (see the module docstring for when that is wrong).

    Raises:
        DeviceError: the variable is set and lists fewer than ``visible_index + 1`` GPUs.
    """
    visible = parse_visible_devices(raw)
    if visible.form == "unset":
        return visible_index
    entries = visible.effective
    if not 0 <= visible_index < len(entries):
        raise DeviceError(f"cuda:{visible_index} is not visible: {explain(visible)} Fix: use an index below "
                          f"{len(entries)}, or change CUDA_VISIBLE_DEVICES.")
    return entries[visible_index] if visible.form in ("gpu-uuid", "mig-uuid") else int(entries[visible_index])
