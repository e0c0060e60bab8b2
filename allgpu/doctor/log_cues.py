"""The last fallback of ``allgpu doctor --log``: a per-cause lexicon of the field's own words, for logs in which
neither a known message (:mod:`allgpu.doctor.log_patterns` and its siblings), an environment block
(:mod:`allgpu.doctor.log_blocks`) nor a cause family's sign (:mod:`allgpu.doctor.log_families`) names a cause.

Every new tool words a cause anew, but the words it uses come from one vocabulary: a build is "CPU only" or "not
compiled with CUDA", a driver "could not be loaded", a library ``libcudart.so`` is "not found", a version "does not
match", a port is "in use". The lexicon lists, per cause, words and word pairs (two words on one line, near each
other) of that vocabulary, written by hand from the causes' definitions (:mod:`allgpu.doctor.causes`) and the
documents that define the words (NVIDIA's CUDA and driver documentation, PyTorch's and TensorFlow's install
guides), not fitted to any log. A pair weighs 2, a single word 1; each cue counts once a log.

A cause is named only when its cues weigh at least :data:`MIN_SCORE` and at least twice the next cause's (cues
absent or split name nothing, and the note lists what was found); the finding says it is the lowest-confidence
reading and which words it rested on.

Pure: reads only the lines given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_SCORE = 2
LEAD = 2.0  # the named cause's cues weigh at least this many times the runner-up's


def _pair(a: str, b: str, gap: int = 40) -> str:
    """Two words on one line, in either order, at most ``gap`` characters apart."""
    return rf"(?:{a})\b.{{0,{gap}}}?\b(?:{b})|(?:{b})\b.{{0,{gap}}}?\b(?:{a})"


_FAIL = (r"not (?:be )?(?:found|loaded|installed|detected|available)|could ?n[o']t|cannot|can't|failed|unable|missing|"
         r"no such file|NOTFOUND|not detect")
_CUDA_LIB = r"(?:lib)?(?:cudart|cublas\w*|cudnn\w*|cufft|curand|cusolver|cusparse|nvrtc|nvjitlink|cupti)\w*"

# (cause, the words as the note shows them, weight, regex)
CUES: tuple[tuple[str, str, int, str], ...] = (
    ("no-driver", "driver + failure", 2, _pair(r"driver", _FAIL)),
    ("no-driver", "nvidia-smi + failure", 2, _pair(r"nvidia-smi", _FAIL + r"|communicate")),
    ("no-driver", "kernel module", 1, r"\bkernel module\b|\bnvidia\.ko\b|\bmodprobe\b"),
    ("no-driver", "cuInit", 1, r"\bcuInit\b"),
    ("no-driver", "unknown error", 1, r"\bunknown error\b"),
    ("no-driver", "NVML + failure", 2, _pair(r"\w*nvml\w*", _FAIL + r"|unknown|uninitiali[sz]ed|not (?:been )?"
                                                            r"initiali[sz]ed", 30)),
    ("no-driver", "container GPU runtime", 1, r"nvidia-docker|--gpus\b|--runtime[= ]nvidia|container toolkit|"
                                              r"nvidia-container"),
    ("no-driver", "driver library", 1, r"\blibcuda\.so|\bnvcuda\.dll|\blibnvidia-ml"),
    ("cpu-build", "CPU + only/version/build", 2, _pair(r"cpu", r"only|version|build|package|wheel|runners?|"
                                                       r"fall(?:ing|s)? ?back", 20)),
    ("cpu-build", "not compiled/built with CUDA/GPU", 2, _pair(r"not|n't|without|no|never", r"(?:compil|buil[dt]|"
                                                               r"enabl|support)\w*.{0,20}\b(?:cuda|gpu)", 10)),
    ("cpu-build", "BLAS = 0", 2, r"(?:^|\|)\s*(?:CU)?BLAS\s*=\s*0\s*(?:\||$)"),
    ("cpu-build", "+cpu / cpuonly", 2, r"\+cpu\b|\bcpuonly\b|\bcpu_\w+\b"),
    ("cpu-build", "running on CPU", 1, r"\b(?:using|use|on|device[:= ]+)\W{0,2}cpu\b"),
    ("cpu-build", "CPU execution provider", 1, r"CPUExecutionProvider"),
    ("cpu-build", "non-CUDA backend", 1, r"\b(?:directml|rocm|mps)\b"),
    ("missing-cuda-libs", "CUDA library file", 1, _CUDA_LIB + r"\.(?:so|dll)|\b\w+64_\d+\.dll"),
    ("missing-cuda-libs", "CUDA/library + not found", 2, _pair(_FAIL, r"cudnn|toolkit|nvcc|cuda (?:runtime|"
                                                              r"install\w*|home|path)|" + _CUDA_LIB)),
    ("missing-cuda-libs", "CUDA_HOME / library path", 1, r"\bCUDA_HOME\b|\bCUDA_PATH\b|\bLD_LIBRARY_PATH\b"),
    ("missing-cuda-libs", "nvcc / toolkit", 1, r"\bnvcc\b|\bcuda toolkit\b|\bcudatoolkit\b"),
    ("cuda-version-mismatch", "version + mismatch", 2, _pair(r"versions?", r"mismatch\w*|incompatible|does ?n[o']t "
                                                            r"match|not match\w*|requires?|insufficient|too old")),
    ("cuda-version-mismatch", "symbol not exported", 2, r"undefined symbol|does not export|symbol not found|"
                                                        r"entry point\b.{0,40}\bnot (?:be )?found"),
    ("cuda-version-mismatch", "compiled with/against", 1, r"\bcompiled (?:with|against|for) (?:cuda|cudnn)"),
    ("cuda-version-mismatch", "driver + old/update", 2, _pair(r"driver", r"too old|older|insufficient|update|"
                                                              r"upgrade|outdated")),
    ("unsupported-compute-capability", "compute capability / sm_NN", 1, r"compute capability|cuda capability|"
                                                                        r"\bsm_\d{2,3}|\bcompute_\d{2,3}"),
    ("unsupported-compute-capability", "no kernel image / arch", 1, r"no kernel image|invalid device function|"
                                                                    r"\barch(?:itecture)?s?\b"),
    ("unsupported-compute-capability", "GPU + not supported", 2, _pair(r"gpu|device|card|architecture",
                                                                       r"not supported|unsupported|no longer "
                                                                       r"supported|not compatible", 20)),
    ("out-of-memory", "out of memory", 2, r"out of memory|\bOOM\b|OutOfMemory|ResourceExhausted|memory exhausted"),
    ("out-of-memory", "cannot allocate", 1, r"(?:failed to|cannot|can't|unable to|tried to) allocate"),
    ("out-of-memory", "batch size", 1, r"\bbatch[ _]size\b"),
    ("memory-held", "another process", 1, r"\b(?:another|other) (?:process|program|job|application)s?\b"),
    ("memory-held", "memory in use", 1, r"\d+ ?MiB ?/ ?\d+ ?MiB|memory[- ]usage|already (?:in use|allocated)"),
    ("memory-held", "busy", 1, r"\bbusy\b"),
    ("nccl-error", "NCCL", 1, r"\bNCCL\b|ProcessGroupNCCL|\bnccl\w+"),
    ("nccl-error", "timeout / watchdog", 1, r"watchdog|timed? ?out\b|\bcollective\b"),
    ("port-in-use", "address in use", 2, r"address already in use|EADDRINUSE|errno 98\b|10048\b"),
    ("port-in-use", "port + in use", 2, _pair(r"port", r"in use|utiliz\w+|occupied|bind|another process")),
    ("port-in-use", "master port", 1, r"master_port|main_process_port|MASTER_PORT"),
    ("process-group-missing", "process group", 1, r"process group|init_process_group"),
    ("process-group-missing", "not initialized", 1, r"\bnot (?:been )?initiali[sz]ed\b"),
    ("process-group-missing", "launcher", 1, r"torchrun|distributed\.launch|dist_train|\bLOCAL_RANK\b|WORLD_SIZE"),
    ("dataloader-shm", "shared memory", 2, r"shared memory|/dev/shm|shm[-_]size"),
    ("dataloader-shm", "bus error", 1, r"\bbus error\b"),
    ("dataloader-shm", "DataLoader worker", 1, r"DataLoader worker"),
    ("invalid-device-index", "invalid device ordinal", 2, r"invalid device (?:ordinal|id|index)|device ordinal"),
    ("devices-hidden", "CUDA_VISIBLE_DEVICES", 1, r"\b(?:CUDA|HIP|NVIDIA)_VISIBLE_DEVICES\b"),
    ("single-device-strategy", "one device / one GPU", 1, r"OneDeviceStrategy|\bonly (?:one|1|a single) GPU|"
                                                          r"single GPU"),
)
# A report's field line: a name of several words, or a [pip3]/[conda] entry.
_REPORT_LINE = re.compile(r"\s*(?:\[\w+\]|[A-Za-z][\w.()/-]*(?: [\w.()/-]+)+:)")
# Lines whose words do not count for a cause: CPU words on a line that also lists a CUDA build (Ollama's runners
# "[cpu cpu_avx2 cuda_v12]") are not a CPU-only build.
_VETO = {"cpu-build": re.compile(r"\bcuda_?v?\d|\bcu\d{3}\b|\brocm", re.I)}
# A line that disclaims itself (TensorFlow's BFC allocator: "this is not a failure") is read for no cause.
_DISCLAIMS = re.compile(r"\bnot a failure\b|\bnot an error\b|can (?:safely )?be ignored|(?:safely|you can) ignore", re.I)
_COMPILED = tuple((cause, words, weight, re.compile(rx, re.I)) for cause, words, weight, rx in CUES)


@dataclass(frozen=True)
class CueReading:
    """What the lexicon found: ``cause`` when one cause's cues lead (else None), its ``score``, and per cause the
    cue words found with the first line (1-based) and text each was found on."""

    cause: str | None
    score: int
    found: dict[str, list[tuple[str, int, str]]]

    def words(self, cause: str) -> str:
        return ", ".join(w for w, _, _ in self.found.get(cause, []))


def read_cues(lines: list[str], in_report: bool = False, known: frozenset[int] = frozenset()) -> CueReading:
    """Score every cause's cues over ``lines``; name the leading cause only when it is clear (see the module).

    ``in_report``: the log holds a tool's environment report (collect_env): its ``Field name: value`` and
    ``[pip3]``/``[conda]`` lines are judged by :mod:`allgpu.doctor.log_blocks`, not read for words ("cuDNN version:
    Could not collect" is a report's blank, not a library that failed to load). ``known``: lines (1-based) a known
    message already matched, judged by its reader (TF-TRT's "Could not find TensorRT" is benign): not read again."""
    found: dict[str, list[tuple[str, int, str]]] = {}
    scores: dict[str, int] = {}
    for cause, words, weight, rx in _COMPILED:
        veto = _VETO.get(cause)
        for number, line in enumerate(lines, 1):
            if (number in known or (in_report and _REPORT_LINE.match(line)) or (veto and veto.search(line))
                    or _DISCLAIMS.search(line)):
                continue
            if rx.search(line):
                found.setdefault(cause, []).append((words, number, line.strip()[:160]))
                scores[cause] = scores.get(cause, 0) + weight
                break
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    if not ranked:
        return CueReading(None, 0, found)
    best, score = ranked[0]
    runner = ranked[1][1] if len(ranked) > 1 else 0
    clear = score >= MIN_SCORE and score >= LEAD * runner
    return CueReading(best if clear else None, score, found)
