"""One verdict from everything the doctor read about a run: devices present / registered by the framework /
used by the job, and the findings in order of likelihood, each a :class:`Problem` whose ``id`` is a documented
cause id (:mod:`allgpu.doctor.causes`), with its evidence and fix.

Pure: built from a :class:`~allgpu.doctor.log_reader.LogReading` (``allgpu doctor --log``), and for
``allgpu doctor --run`` also from GPU samples, lint findings and environment problems (:func:`combine`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from allgpu.doctor.causes import CAUSES
from allgpu.doctor.log_blocks import block_evidence, block_notes
from allgpu.doctor.log_enums import enum_notes
from allgpu.doctor.log_evidence import setting_evidence
from allgpu.doctor.log_facts import INPUT_SHARE, fact_notes
from allgpu.doctor.log_reader import ALL_PATTERNS, LogHit, LogReading
from allgpu.doctor.log_setting import setting_notes
from allgpu.doctor.log_unknown import error_note, next_steps
from allgpu.doctor.problem import Problem

# A cause is reported when its score reaches this; one message of weight 1.0 settles it.
THRESHOLD = 0.6
MAX_EVIDENCE = 4
_MEANING = {p.id: p.what for p in ALL_PATTERNS}
@dataclass(frozen=True)
class Verdict:
    """The doctor's answer for one run.

    Attributes:
        present: GPUs that exist (NVML, or what the log shows), None when unknown.
        registered: GPUs the framework registered, None when unknown.
        used: GPUs the job used (strategy replicas on GPUs, NVML activity), None when unknown.
        findings: causes in order of likelihood (``Problem.id`` is a cause id), with evidence and fix.
        notes: facts worth knowing that are not causes (which frameworks spoke, what the strategy did).
        nothing_known: True when no known message or reading explains anything (then ``findings`` is empty).
    """

    present: int | None
    registered: int | None
    used: int | None
    findings: tuple[Problem, ...]
    notes: tuple[str, ...] = ()
    nothing_known: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"devices": {"present": self.present, "registered": self.registered, "used": self.used},
                "findings": [p.to_dict() for p in self.findings], "notes": list(self.notes),
                "nothing_known": self.nothing_known, "causes": [p.id for p in self.findings]}

    @property
    def cause_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.findings)


@dataclass
class _Scores:
    """Evidence gathered per cause: score is the strongest weight plus 0.1 per further distinct message."""

    weights: dict[str, list[tuple[float, str, str]]] = field(default_factory=lambda: defaultdict(list))
    also: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    def add(self, cause: str, weight: float, source: str, evidence: str, also: tuple[str, ...] = ()) -> None:
        self.weights[cause].append((weight, source, evidence))
        if also:
            self.also.setdefault((cause, source), also)

    def candidates(self, cause: str) -> tuple[str, ...]:
        """The other causes the strongest evidence for ``cause`` is known to have, in order."""
        items = sorted(self.weights.get(cause, []), key=lambda w: -w[0])
        return self.also.get((cause, items[0][1]), ()) if items else ()

    def score(self, cause: str) -> float:
        items = self.weights.get(cause, [])
        if not items:
            return 0.0
        distinct = len({s for _, s, _ in items})
        return min(2.0, max(w for w, _, _ in items) + 0.1 * (distinct - 1))

    def drop(self, cause: str) -> None:
        self.weights.pop(cause, None)


def _line(hit: LogHit) -> str:
    return f"log line {hit.line}: {hit.text[:160]}"


def _log_scores(log: LogReading) -> _Scores:
    scores = _Scores()
    for hit in log.causes():
        scores.add(hit.cause, hit.weight, hit.pattern, _line(hit), hit.also)
    for cause, weight, source, text, also in setting_evidence(log):
        scores.add(cause, weight, source, text, also)
    registered = len(log.registered)
    # A strategy on fewer GPUs than the framework registered.
    if registered >= 2:
        on = log.strategy_gpus if log.strategy_gpus is not None else log.strategy_replicas
        if on is not None and on < registered:
            hit = next(h for h in reversed(log.hits) if h.pattern in ("strategy-devices", "strategy-using"))
            scores.add("single-device-strategy", 1.0, "strategy-count",
                       f"{_line(hit)} (the framework registered {registered} GPUs)")
        for hit in log.hits:
            if hit.pattern == "one-device-strategy":
                scores.add("single-device-strategy", 1.0, hit.pattern, _line(hit))
    _figure_scores(log, scores)
    # XLA prints the memory free after a cuDNN handle failure: with most of the GPU free, memory is not the cause.
    for hit in log.hits:
        usage = re.search(r"(\d+) bytes free, (\d+) bytes total", hit.text) if hit.pattern == "xla-memory-usage" else None
        if usage and int(usage.group(2)) and int(usage.group(1)) >= 0.5 * int(usage.group(2)):
            scores.weights["memory-held"] = [w for w in scores.weights.get("memory-held", []) if w[1] != "cudnn-handle"]
            if not scores.weights["memory-held"]:
                scores.drop("memory-held")
    # TensorFlow tries its CUDA libraries at import even with no driver ("Ignore above cudart dlerror if you do not
    # have a GPU set up"); only past the driver does it say "Cannot dlopen some GPU libraries". With no driver the
    # libraries are not what keeps the GPU idle.
    if scores.score("no-driver") >= 1.0 and not any(h.pattern == "tf-cannot-dlopen" for h in log.hits):
        scores.drop("missing-cuda-libs")
    # CUDA_ERROR_NO_DEVICE with no hidden-devices setting and a driver that is missing: the driver, not hiding.
    if scores.score("no-driver") >= 1.0 and log.cvd is None:
        scores.drop("devices-hidden")
    # JAX's "No GPU/TPU found" is its summary; a reason JAX gave for the CUDA backend, or a failed cuInit (a CPU-only
    # jaxlib never calls cuInit), wins over it.
    if any((h.pattern == "jax-backend-failed" and h.cause and h.cause != "cpu-build")
           or h.pattern in ("cuinit-303", "cuda-no-device") for h in log.hits):
        scores.weights["cpu-build"] = [w for w in scores.weights.get("cpu-build", []) if w[1] != "jax-fallback-cpu"]
        if not scores.weights["cpu-build"]:
            scores.drop("cpu-build")
    return scores


def _figure_scores(log: LogReading, scores: _Scores) -> None:
    """Causes the log's figures show: step time mostly data wait (input-bound); memory held at 0% utilisation (an
    idle GPU: weak, one nvidia-smi snapshot may fall between steps), or memory held while nvidia-smi lists no process
    (memory-held, with input-bound as the other candidate)."""
    facts = log.facts
    if facts.data_share is not None and facts.data_share >= INPUT_SHARE and facts.step_line:
        line, text = facts.step_line
        scores.add("input-bound", 1.0, "step-timing",
                   f"log line {line}: {text[:120]} ({facts.data_share:.0%} of the step waits for data)")
    for row in facts.idle_gpus():
        if facts.smi_processes == 0:
            # Memory held while nvidia-smi lists no process: a process it cannot see (another container or VM, another
            # user's, one that has not exited), or, inside a container, the job itself sitting idle.
            scores.add("memory-held", 0.7, "smi-held-no-process",
                       f"nvidia-smi: GPU {row.index} holds {row.used_mib} of {row.total_mib} MiB at 0% utilisation "
                       "and lists no process using it", also=("input-bound",))
        else:
            scores.add("input-bound", 0.5, "smi-idle", f"nvidia-smi: GPU {row.index} holds {row.used_mib} MiB at 0% "
                                                       "utilisation (the job has the GPU but does not compute)")


def _findings(scores: _Scores, extra_notes: dict[str, str] | None = None) -> list[Problem]:
    ranked = sorted((c for c in scores.weights if scores.score(c) >= THRESHOLD), key=lambda c: -scores.score(c))
    out = []
    for cause_id in ranked:
        cause = CAUSES[cause_id]
        evidence = []
        strongest = sorted(scores.weights[cause_id], key=lambda w: -w[0])
        for _, _, text in strongest:
            if text not in evidence:
                evidence.append(text)
        summary = cause.title[0].upper() + cause.title[1:]
        meaning = _MEANING.get(strongest[0][1])
        summary += f": {meaning}." if meaning else "."
        if extra_notes and cause_id in extra_notes:
            summary += " " + extra_notes[cause_id]
        out.append(Problem(cause_id, cause.severity, summary, cause.fix, evidence=tuple(evidence[:MAX_EVIDENCE])))
    return _with_candidates(scores, ranked, out)


def _with_candidates(scores: _Scores, ranked: list[str], out: list[Problem]) -> list[Problem]:
    """After the first finding, the other causes its evidence is known to have (a message settled differently in
    different threads), in order, unless the log already names them: candidates rather than one wrong cause."""
    if not ranked:
        return out
    first = ranked[0]
    others = [c for c in scores.candidates(first) if c not in ranked and c in CAUSES]
    if not others:
        return out
    evidence = out[0].evidence[:1]
    names = ", ".join(f"{CAUSES[c].title} ({c})" for c in others)
    out[0] = Problem(out[0].id, out[0].severity, out[0].cause + f" The same evidence has other causes in other "
                     f"runs: {names}; the log does not decide between them, so they follow as candidates.",
                     out[0].fix, evidence=out[0].evidence)
    candidates = [Problem(c, "warning", f"Candidate: {CAUSES[c].title} (the evidence of the first finding is "
                          "known to have this cause too).", CAUSES[c].fix, evidence=evidence) for c in others]
    return out[:1] + candidates + out[1:]


def _details(log: LogReading) -> dict[str, str]:
    """Specifics the log gives for a cause: the libraries that failed to load."""
    libs = []
    for h in log.hits:
        if h.cause == "missing-cuda-libs":
            for name in re.findall(r"'?((?:lib)?(?:cu|nv)\w*[\w.]*?(?:\.so[\d.]*|\.dll))", h.text):
                if name not in libs:
                    libs.append(name)
    details = {"missing-cuda-libs": "Failed to load: " + ", ".join(libs[:6]) + "."} if libs else {}
    if log.cvd is None and any(h.pattern == "cuda-no-device" for h in log.hits):
        details["devices-hidden"] = ("CUDA reports no device: CUDA_VISIBLE_DEVICES (or the scheduler) hides them, "
                                     "or the container/VM has no GPU passed through.")
    if log.cvd is not None and log.cvd in ("", "-1"):
        details["devices-hidden"] = f"The run sets CUDA_VISIBLE_DEVICES={log.cvd!r}, which hides every GPU."
    return details


def _log_devices(log: LogReading) -> tuple[int | None, int | None, int | None]:
    registered = len(log.registered) if log.registered else (0 if log.registered_none else None)
    present = len(log.present | log.registered) if (log.present or log.registered) else None
    used = log.strategy_gpus if log.strategy_gpus is not None else None
    if used is None and log.strategy_replicas is not None and registered:
        used = min(log.strategy_replicas, registered)
    if used is None and log.nccl_ranks:
        used = log.nccl_ranks
    return present, registered, used


def _log_notes(log: LogReading) -> list[str]:
    notes = []
    if log.frameworks:
        notes.append("Frameworks in the log: " + ", ".join(sorted(log.frameworks)) + ".")
    if log.registered:
        notes.append("GPUs registered: " + ", ".join(f"GPU:{i}" for i in sorted(log.registered)) + ".")
    elif log.registered_none:
        notes.append("The framework registered no GPU.")
    if log.strategy_replicas is not None:
        notes.append(f"The strategy runs {log.strategy_replicas} replica(s)"
                     + (f", {log.strategy_gpus} on GPUs." if log.strategy_gpus is not None else "."))
    return (notes + setting_notes(log.setting) + fact_notes(log.facts) + block_notes(log.blocks)
            + enum_notes(log.enums))


def _all_used(present: int | None, registered: int | None, used: int | None) -> bool:
    """Every GPU present registered and used; with several GPUs, the log must show the job using them all
    (a strategy's replica count, NCCL ranks): TensorFlow registers every GPU but computes on GPU:0 alone without a
    strategy."""
    if not registered:
        return False
    if present is not None and present > registered:
        return False
    if used is None:
        return registered == 1
    return used >= registered


FAMILY_NOTE = ("Read from the wording's family, not from a message the doctor knows: lower confidence; check the "
               "evidence line.")


def _family_findings(log: LogReading) -> list[Problem]:
    """The fallback when no known message names a cause: the cause families' signs
    (:mod:`allgpu.doctor.log_families`), each finding marked as of lower confidence; none when no sign appears."""
    scores = _Scores()
    for hit in log.families:
        scores.add(hit.cause, hit.weight, "family:" + hit.sign, f"log line {hit.line}: {hit.text}", hit.also)
    return _findings(scores, {cause: FAMILY_NOTE for cause in scores.weights})


BLOCK_NOTE = ("Read from the environment the log shows (collect_env, a package list, ONNX Runtime's providers), not "
              "from a message: lower confidence; check the evidence.")


def _block_findings(log: LogReading) -> list[Problem]:
    """The fallback's first step when no known message names a cause: the settings the log's environment blocks
    state (:mod:`allgpu.doctor.log_blocks`), marked as of lower confidence."""
    scores = _Scores()
    for cause, weight, source, text, also in block_evidence(log.blocks, bool(log.registered)):
        scores.add(cause, weight, source, text, also)
    return _findings(scores, {cause: BLOCK_NOTE for cause in scores.weights})


CUE_NOTE = ("Read from the field's words alone (the lowest confidence: no message, environment block or wording "
            "family the doctor knows names a cause); the words it rested on: {words}. Check them against the log.")


def _cue_findings(log: LogReading) -> list[Problem]:
    """The last fallback: the cause whose cue words lead clearly (:mod:`allgpu.doctor.log_cues`); none when the
    cues are absent or split."""
    cause = log.cues.cause
    if cause is None:
        return []
    scores = _Scores()
    for words, line, text in log.cues.found[cause]:
        scores.add(cause, THRESHOLD, "cue:" + words, f"log line {line}: {text}")
    return _findings(scores, {cause: CUE_NOTE.format(words=log.cues.words(cause))})


def verdict_from_log(log: LogReading) -> Verdict:
    """The verdict for a log alone (``allgpu doctor --log FILE``).

    No cause is named without a message that points at it: a log with no known message gives an empty
    ``findings`` and ``nothing_known=True``; a log showing every registered GPU in use gives ``multi-gpu-ok``.
    """
    scores = _log_scores(log)
    present, registered, used = _log_devices(log)
    findings = _findings(scores, _details(log))
    if not findings:
        findings = _block_findings(log) or _family_findings(log)
    if not findings and not _all_used(present, registered, used):
        findings = _cue_findings(log)
    if not findings and _all_used(present, registered, used):
        findings = [Problem("multi-gpu-ok", "info",
                            f"The log shows {registered} GPU(s) registered"
                            + (f" and {used} used" if used is not None else "")
                            + " and no message that keeps one idle.", CAUSES["multi-gpu-ok"].fix,
                            evidence=tuple(_line(h) for h in log.hits
                                           if h.pattern in ("tf-adding-visible", "tf-created-device", "jax-devices",
                                                            "strategy-devices", "strategy-using",
                                                            "nccl-init-complete"))[:MAX_EVIDENCE])]
    nothing = not findings
    notes = _log_notes(log)
    if nothing and registered:
        notes.append(f"The log shows {registered} GPU(s) registered but not how many the job used, and no message "
                     "that keeps one idle, so it names no cause. A strategy's replica count ('Number of devices: "
                     "N', num_replicas_in_sync) or `allgpu doctor --run` would tell.")
    elif nothing:
        notes.append(next_steps(log.frameworks))
    if nothing:
        errors = error_note(log.errors)
        if errors:
            notes.append(errors)
    if nothing and log.cues.found:
        notes.append("Words of causes found, too few or too split to name one: " + "; ".join(
            f"{cause} ({log.cues.words(cause)})" for cause in log.cues.found) + ".")
    return Verdict(present, registered, used, tuple(findings), tuple(notes), nothing)


def combine(log: LogReading | None, *, present: int | None = None, used: int | None = None,
            extra: Iterable[tuple[str, float, str, str]] = (), notes: Iterable[str] = ()) -> Verdict:
    """A verdict from a run's log plus other evidence (``allgpu doctor --run``).

    Args:
        log: the run's output read by :func:`~allgpu.doctor.log_reader.read_log`, or None.
        present: GPUs NVML (or the environment reading) shows; overrides the log's count.
        used: GPUs the job was seen using through NVML samples; overrides the log's count.
        extra: further evidence as ``(cause id, weight, source, evidence text)`` from GPU samples, lint findings
            and readings.
        notes: facts to show that are not causes.
    """
    scores = _log_scores(log) if log is not None else _Scores()
    for cause, weight, source, text in extra:
        scores.add(cause, weight, source, text)
    lp, registered, lu = _log_devices(log) if log is not None else (None, None, None)
    present = present if present is not None else lp
    used = used if used is not None else lu
    if "multi-gpu-ok" in scores.weights and any(c != "multi-gpu-ok" for c in scores.weights
                                                if scores.score(c) >= THRESHOLD):
        scores.drop("multi-gpu-ok")
    findings = _findings(scores)
    all_notes = (_log_notes(log) if log is not None else []) + list(notes)
    nothing = not findings
    if nothing:
        all_notes.append("Nothing the doctor read (output, GPU samples, script, environment) names a cause.")
    return Verdict(present, registered, used, tuple(findings), tuple(all_notes), nothing)
