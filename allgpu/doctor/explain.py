"""``allgpu doctor --explain ID``: the long text behind a one-line finding, for every id any tool reports: the step
monitor's (``input-bound``, ``communication-bound``, ``straggler``, ``host-bound``, ``idle-device``,
``shared-device``, ``needs-sharding``), the doctor's causes (:mod:`allgpu.doctor.causes`) and lint's rules
(``TF001``...)."""

from __future__ import annotations

import re

from allgpu.devices.advice import IDLE_FIX, MEMORY_FINDING, SHARED_FIX
from allgpu.errors import ArgumentError
from allgpu.monitor.diagnosis import FIXES

# The monitor's fixes are templates filled from the run's figures; without a run, their slots read as words.
_SLOTS = {"current": "now N", "rule": "one per CPU core over the replicas, capped",
          "batch": "N", "replica": "R"}
_MONITOR = {
    "input-bound": "the replicas wait for their next batch for a large share of each step",
    "communication-bound": "the replicas wait on the gradient all-reduce beyond what backward overlaps",
    "straggler": "one replica computes a step markedly slower than the median, and every other replica waits",
    "host-bound": "the device waits on the Python side: small kernels, host syncs, logging in the step",
}
_DEVICES = {
    "idle-device": ("a visible GPU has no replica: it does no work", IDLE_FIX),
    "shared-device": ("two or more replicas share one GPU", SHARED_FIX),
    MEMORY_FINDING: ("the training state does not fit a device mirrored, and would sharded",
                     "Use allgpu.FullyShardedStrategy() (parameters, gradients and optimizer state sharded across "
                     "replicas), a smaller model or batch, or mixed precision."),
}


def explain(finding_id: str) -> str:
    """The explanation and fix for ``finding_id`` (case as reported; lint ids in any case).

    Raises:
        ArgumentError: the id is none of the monitor's, the doctor's or lint's (the message lists them).
    """
    from allgpu.doctor.causes import CAUSES

    if finding_id in _MONITOR:
        fix = re.sub(r"\{(\w+)\}", lambda m: _SLOTS.get(m[1], m[1]), FIXES[finding_id])
        return f"{finding_id} (step monitor): {_MONITOR[finding_id]}.\n\nFix: {fix}\n"
    if finding_id in _DEVICES:
        what, fix = _DEVICES[finding_id]
        return f"{finding_id}: {what}.\n\nFix: {fix}\n"
    if finding_id in CAUSES:
        cause = CAUSES[finding_id]
        return f"{cause.id} ({cause.severity}, doctor): {cause.title}.\n\nFix: {cause.fix}\n"
    from allgpu.lint.catalog import RULES, explain as explain_rule

    if finding_id.upper() in RULES:
        return explain_rule(finding_id)
    known = list(dict.fromkeys([*_MONITOR, *_DEVICES, *CAUSES, *RULES]))  # a cause id can be a monitor id too
    raise ArgumentError(f"unknown finding id {finding_id!r}; known ids: {', '.join(known)}. Fix: copy the id "
                        "from the finding's line (`allgpu: [warning] ID: ...`).")
