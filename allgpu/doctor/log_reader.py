"""Read a captured log of a TensorFlow, JAX, Keras or PyTorch run into a :class:`LogReading`: every known
message with its line number (:mod:`allgpu.doctor.log_patterns`), the cause each points at, and the device facts
(GPUs present, registered, used by the strategy).

Pure: reads only the text given. The verdict is drawn from the reading by :mod:`allgpu.doctor.verdict`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from allgpu.doctor.log_blocks import EnvBlocks, read_blocks
from allgpu.doctor.log_facts import LogFacts, read_facts
from allgpu.doctor.log_enums import EnumRead, read_enums
from allgpu.doctor.log_cues import CueReading, read_cues
from allgpu.doctor.log_families import FamilyHit, library_cause, read_families
from allgpu.doctor.log_patterns import PATTERNS, PREFIX, Pattern
from allgpu.doctor.log_patterns_frameworks import FRAMEWORK_PATTERNS
from allgpu.doctor.log_patterns_setup import SETUP_PATTERNS
from allgpu.doctor.log_setting import Setting, read_setting
from allgpu.doctor.log_throughput import Throughput, read_throughput
from allgpu.doctor.log_unknown import error_lines

ALL_PATTERNS: tuple[Pattern, ...] = PATTERNS + SETUP_PATTERNS + FRAMEWORK_PATTERNS

_UNIT = {"B": 1 / 2**20, "KB": 1 / 1024, "KiB": 1 / 1024, "MB": 1.0, "MiB": 1.0, "GB": 1024.0, "GiB": 1024.0,
         "TB": 2**20, "TiB": 2**20}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colour codes in captured terminal output
# Quotes that a browser or editor retyped in a pasted message ("couldn‘t communicate").
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
# Markdown bold a paste keeps around the words that matter ("is_available=**False**", "| **0%** |").
_BOLD = re.compile(r"\*\*(?=\S)|(?<=\S)\*\*")
# Memory others hold, as a fraction of the GPU, past which an out-of-memory is blamed on them.
HELD_FRACTION = 0.5
# PyTorch's allocator figures (reserved, or allocated + cached) leave out the process's CUDA context: memory they do
# not account for is another process's only beyond a context's size, and then a sizeable share of the GPU.
CONTEXT_MIB, OTHERS_FRACTION = 512.0, 0.3
# Non-blank lines kept as the log's ending.
TAIL = 3


@dataclass(frozen=True)
class LogHit:
    """One known message at one line: ``line`` is 1-based, ``text`` the message without its log prefix, ``also``
    the other causes the same message is known to have (candidates after ``cause``)."""

    line: int
    pattern: str
    cause: str | None
    weight: float
    text: str
    also: tuple[str, ...] = ()


@dataclass
class LogReading:
    """What a log says about devices.

    Attributes:
        lines: number of lines read.
        frameworks: frameworks whose messages appear (``"tensorflow"``, ``"jax"``, ``"pytorch"``, ``"nccl"``).
        hits: the known messages, in line order (facts and causes).
        present: GPU indices the log shows exist (TensorFlow's "Found device k", nvidia-smi rows).
        registered: GPU indices the framework registered ("Adding visible gpu devices", "Created device", JAX's
            device list); ``registered_none`` is True when the log says none was ("Skipping registering").
        strategy_replicas: replicas the strategy reported ("Number of devices: N", num_replicas_in_sync), or
            None; ``strategy_gpus`` counts the GPU devices in "Using MirroredStrategy with devices (...)".
        nccl_ranks: ranks NCCL joined, when the log shows "Init COMPLETE".
        cvd: the ``CUDA_VISIBLE_DEVICES`` value the log shows being set, or None.
        facts: versions, GPU names, ``nvidia-smi`` rows and step timing the log states
            (:mod:`allgpu.doctor.log_facts`).
        setting: operating system, frameworks, builds' CUDA and devices named (:mod:`allgpu.doctor.log_setting`).
        throughput: the throughput series (:mod:`allgpu.doctor.log_throughput`).
        tail: the last few non-blank lines, ``(line, text)``: where a run that hangs stops.
        families: the signs of cause families (:mod:`allgpu.doctor.log_families`), the fallback the verdict uses
            when no known message names a cause.
        blocks: the environment blocks (collect_env, package lists, ONNX Runtime's providers;
            :mod:`allgpu.doctor.log_blocks`), read for the same fallback and shown whatever the verdict.
        enums: the CUDA, NVML and NCCL statuses read by name, number or text (:mod:`allgpu.doctor.log_enums`),
            shown whatever the verdict (the families use those that name a cause).
        cues: the field's words per cause (:mod:`allgpu.doctor.log_cues`), the last fallback.
        errors: the log's own error lines no reader matched, ``(line, text)``, last first
            (:mod:`allgpu.doctor.log_unknown`), quoted when nothing names a cause.
    """

    lines: int = 0
    frameworks: set[str] = field(default_factory=set)
    hits: list[LogHit] = field(default_factory=list)
    present: set[int] = field(default_factory=set)
    registered: set[int] = field(default_factory=set)
    registered_none: bool = False
    strategy_replicas: int | None = None
    strategy_gpus: int | None = None
    nccl_ranks: int | None = None
    cvd: str | None = None
    facts: LogFacts = field(default_factory=LogFacts)
    setting: Setting = field(default_factory=Setting)
    throughput: Throughput = field(default_factory=Throughput)
    tail: list[tuple[int, str]] = field(default_factory=list)
    families: list[FamilyHit] = field(default_factory=list)
    blocks: EnvBlocks = field(default_factory=EnvBlocks)
    enums: list[EnumRead] = field(default_factory=list)
    cues: CueReading = field(default_factory=lambda: CueReading(None, 0, {}))
    errors: list[tuple[int, str]] = field(default_factory=list)

    def causes(self) -> list[LogHit]:
        """Hits that point at a cause (weight > 0)."""
        return [h for h in self.hits if h.cause and h.weight > 0]


_UNIT_LOWER = {k.lower(): v for k, v in _UNIT.items()}


def _mib(value: str, unit: str) -> float:
    return float(value) * _UNIT_LOWER.get(unit.lower(), 1.0)


def _framework(src: str, text: str) -> str | None:
    low = (src + " " + text).lower()
    if "nccl" in low:
        return "nccl"
    if "jax" in low or "xla_bridge" in low or "jaxlib" in low:
        return "jax"
    if "tensorflow" in low or "tsl/" in low or "local_xla" in low or src.endswith(".cc"):
        return "tensorflow"
    if "torch" in low or "cuda out of memory" in low:
        return "pytorch"
    return None


def _jax_backend_cause(reason: str) -> tuple[str | None, float]:
    """Which cause JAX's "Unable to initialize backend 'cuda': …" reason names."""
    if re.search(r"version \d+, but JAX was built against|Outdated|is older than|minimum supported", reason, re.I):
        return "cuda-version-mismatch", 1.0
    if re.search(r"driver version is insufficient|CUDA_ERROR_INSUFFICIENT_DRIVER", reason):
        return "cuda-version-mismatch", 1.0
    if re.search(r"Unable to load|cannot open shared object|could not load|not found.*lib", reason, re.I):
        return "missing-cuda-libs", 1.0
    if re.search(r"CUDA_ERROR_NO_DEVICE|no CUDA-capable device", reason):
        return "devices-hidden", 0.6
    if re.search(r"Could not find registered platform with name: \"(?:cuda|gpu)\"", reason):
        return "cpu-build", 0.8
    if re.search(r"No visible GPU devices|no supported devices found", reason):
        return "devices-hidden", 0.6
    if re.search(r"CUDA_ERROR_NO_BINARY_FOR_GPU|no kernel image", reason):
        return "unsupported-compute-capability", 1.0
    if re.search(r"OUT_OF_MEMORY|out of memory", reason, re.I):
        return "memory-held", 1.0
    return None, 0.0


def _torch_oom_cause(text: str) -> tuple[str, float]:
    """Out-of-memory of the job itself, or memory held by others, from PyTorch's figures.

    Oldest format (PyTorch <= 1.4): "(GPU 0; 3.95 GiB total capacity; 1.62 GiB already allocated; 23.00 MiB free;
    9.10 MiB cached)". Old: "(GPU 0; 10.76 GiB total capacity; 996 MiB already allocated; 8.81 MiB free; 1010 MiB
    reserved in total by PyTorch)". New: "GPU 0 has a total capacity of 14.75 GiB of which 235 MiB is free. [Process N has X
    memory in use. | Including non-PyTorch memory, this process has X memory in use.] Of the allocated memory X is
    allocated by PyTorch, and Y is reserved by PyTorch but unallocated."
    """
    text = text.lower()  # pastes are sometimes lowercased
    num = r"([\d.]+) ([kmgt]i?b)"
    total = re.search(num + r" total capacity|total capac\w* of " + num, text)
    free = re.search(num + r" free|of which " + num + r" is free", text)
    if not total or not free:
        return "out-of-memory", 1.0
    total_mib = _mib(*[g for g in total.groups() if g][:2])
    free_mib = _mib(*[g for g in free.groups() if g][:2])
    own = re.search(r"this process has " + num, text)
    if own:
        own_mib = _mib(*own.groups())
    else:
        reserved = re.search(num + r" reserved in total by pytorch", text)
        parts = re.search(r"memory " + num + r" is allocated by pytorch, and " + num + r" is reserved", text)
        # PyTorch <= 1.4: "X already allocated; Y free; Z cached" (cached: reserved by its allocator, not in use)
        cached = re.search(num + r" already allocated; [^;]*; " + num + r" cached", text)
        if reserved:
            own_mib = _mib(*reserved.groups())
        elif cached:
            own_mib = _mib(*cached.groups()[:2]) + _mib(*cached.groups()[2:])
        elif parts:
            own_mib = _mib(*parts.groups()[:2]) + _mib(*parts.groups()[2:])
        else:
            return "out-of-memory", 1.0
    others = total_mib - free_mib - own_mib
    if not own:  # the allocator's figures leave out this process's own CUDA context (a few hundred MiB)
        others -= CONTEXT_MIB
        return ("memory-held", 1.0) if others > OTHERS_FRACTION * total_mib else ("out-of-memory", 1.0)
    return ("memory-held", 1.0) if others > HELD_FRACTION * total_mib else ("out-of-memory", 1.0)


# The innermost traceback frame of an out-of-memory raised before the job held any memory of its own: building a
# module's parameters (torch/nn/modules' __init__, reset_parameters), moving a module to the GPU (Module._apply /
# .cuda() / .to()), or the CUDA context's creation (torch.cuda's _lazy_init, set_device). Loading weights
# (torch.load, load_state_dict, from_pretrained) is not among them: a model too large for the GPU fails there too.
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
_SETUP_FRAME = re.compile(r"(?:torch[/\\]nn[/\\]modules[/\\]\w+\.py:(?:__init__|reset_parameters|_apply|<lambda>|"
                          r"convert|cuda|to)|torch[/\\]cuda[/\\]__init__\.py:\w+)$")


def _oom_where(lines: list[str], i: int) -> tuple[str, float]:
    """Out-of-memory of the job, or memory held by another process when the traceback above line ``i`` shows the
    job failing while it built, moved or set up its model (it held nothing yet)."""
    frames = [m for m in (_FRAME.match(ln) for ln in lines[max(0, i - 40):i]) if m]
    if frames and _SETUP_FRAME.search(f"{frames[-1].group(1)}:{frames[-1].group(2)}"):
        return "memory-held", 1.0
    return "out-of-memory", 1.0


def _message(raw: str) -> tuple[str, str]:
    m = PREFIX.match(raw.strip())
    if m:
        return m.group("src"), m.group("msg")
    return "", raw.strip()


def _facts(reading: LogReading, pat: Pattern, m: re.Match[str]) -> None:
    kind = pat.kind
    if kind == "present":
        reading.present.add(int(m.group(1)))
    elif kind == "registered":
        reading.registered.update(int(x) for x in re.findall(r"\d+", m.group(1)))
    elif kind == "skipped":
        reading.registered_none = True
    elif kind == "strategy":
        reading.strategy_replicas = int(m.group(1) or m.group(2))
    elif kind == "strategy-list":
        devices = [d for d in re.findall(r"device:(\w+):\d+|/(gpu|cpu):\d+", m.group(1), re.I)]
        kinds = [(a or b).upper() for a, b in devices]
        if kinds:
            reading.strategy_gpus = kinds.count("GPU")
            reading.strategy_replicas = len(kinds)
    elif kind == "jax-devices":
        devices = re.findall(r"(\w+?)(?:Device)?\(id=(\d+)", m.group(1))
        gpus = {int(i) for name, i in devices if name.lower() in ("cuda", "gpu", "streamexecutorgpu")}
        reading.registered.update(gpus)
        if not gpus:
            reading.registered_none = True
    elif kind == "lightning":
        if m.group(1) == "True" and not reading.present:
            reading.present.add(0)
        if m.group(2) == "False":
            reading.strategy_gpus = 0
    elif kind == "strategy-cpu":
        if reading.strategy_gpus is None:
            reading.strategy_gpus = 0
    elif kind == "nccl-ranks":
        reading.nccl_ranks = max(reading.nccl_ranks or 0, int(m.group(1)))


# What a REPL or notebook (Python's or R's) prints for a call: a bare value, maybe after "Out[3]:" or ">>>" lines.
# R prints "[1] FALSE"; pastes mark an answer "> false", "=> false" or "output: false"
_ANSWER = re.compile(r"^(?:Out\[\d+\]:\s*|\[1\]\s*|=?>\s*|output:\s*)?(False|True|None|\d+|\[\])\s*$", re.I)


def _answer(lines: list[str], i: int) -> str:
    """The value printed for a call at line ``i``: the first non-blank line after it, or a bare False/True/None
    or count among the next four non-blank lines (pastes put the other calls, a version or "returns:" between)."""
    following = [ln.strip() for ln in lines[i + 1:i + 12] if ln.strip()][:4]
    for line in following:
        m = _ANSWER.match(line)
        if m:
            return m.group(1)
    return following[0] if following else ""


def _hit(pat: Pattern, m: re.Match[str], text: str, lines: list[str], i: int, reading: LogReading
         ) -> tuple[str | None, float] | None:
    """The (cause, weight) this match gives, or None when it gives no cause."""
    kind = pat.kind
    if kind == "library":
        return library_cause(m.group(1))
    if kind == "jax-backend":
        return _jax_backend_cause(m.group(1))
    if kind == "torch-oom":
        tail = " ".join(lines[i:i + 3])  # the figures may wrap onto the next lines
        return _torch_oom_cause(tail)
    if kind == "oom-where":
        return _oom_where(lines, i)
    if kind == "cvd":
        value = m.group(1).strip().strip("'\"").strip()
        reading.cvd = value
        if value in ("", "-1") or value.startswith("-1"):
            return "devices-hidden", 1.0
        return None
    if kind == "one-device":
        return ("single-device-strategy", 1.0) if len(reading.registered) >= 2 else None
    if kind == "unavailable-flag":
        follow = m.group(1) or _answer(lines, i)
        return ("", 0.0) if follow.lower().startswith("false") or follow == "[]" else None
    if kind == "count-flag":
        follow = m.group(1) or m.group(2) or _answer(lines, i)
        return ("", 0.0) if follow == "0" else None
    if kind in ("built-with-cuda", "version-cuda"):
        follow = m.group(1) or _answer(lines, i)
        return ("cpu-build", 1.0) if follow.lower().startswith(("false", "none")) else None
    if kind in ("tf-free-memory", "tf-free-memory-next"):
        if kind == "tf-free-memory":
            total, free = _mib(m.group(1), m.group(2)), _mib(m.group(3), m.group(4))
        else:
            prev = re.search(r"Total memory: ([\d.]+)([KMGT]i?B)", lines[i - 1] if i else "")
            if not prev:
                return None
            total, free = _mib(*prev.groups()), _mib(m.group(1), m.group(2))
        return ("memory-held", 0.8) if total > 0 and free < HELD_FRACTION * total else None
    if pat.cause and pat.weight > 0:
        return pat.cause, pat.weight
    return None


def read_log(text: str) -> LogReading:
    """Read a log (stdout and stderr of a run, or a paste from a bug report).

    Args:
        text: the log; any mix of TensorFlow, JAX, PyTorch and NCCL output, with or without log prefixes.

    Returns:
        A :class:`LogReading`; an empty ``hits`` list when no known message appears.
    """
    lines = _BOLD.sub("", _ANSI.sub("", text).translate(_QUOTES)).splitlines()
    reading = LogReading(lines=len(lines), facts=read_facts(lines), setting=read_setting(lines),
                         throughput=read_throughput(lines))
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        src, msg = _message(raw)
        for pat in ALL_PATTERNS:
            m = pat.regex.search(raw if pat.id == "nvidia-smi-row" else msg)
            if not m:
                continue
            _facts(reading, pat, m)
            given = _hit(pat, m, msg, lines, i, reading)
            if pat.kind in ("unavailable-flag", "count-flag") and given is None:
                continue  # is_available() printed True, or nothing follows
            cause, weight = given if given else (None, 0.0)
            also = pat.also if cause else ()
            if pat.kind == "oom-where" and cause != pat.cause:  # read as memory held: the job's own OOM follows
                also = tuple(c for c in (pat.cause, *pat.also) if c and c != cause)
            reading.hits.append(LogHit(i + 1, pat.id, cause or None, weight, msg[:240], also))
            fw = _framework(src, msg)
            if fw and (cause or pat.kind):
                reading.frameworks.add(fw)
    reading.frameworks |= reading.setting.frameworks
    reading.families = read_families(lines, frozenset(h.line for h in reading.hits))
    reading.blocks = read_blocks(lines)
    reading.enums = read_enums(lines)
    reading.cues = read_cues(lines, bool(reading.blocks.collect_env), frozenset(h.line for h in reading.hits))
    reading.tail = [(n + 1, ln.strip()[:240]) for n, ln in enumerate(lines) if ln.strip()][-TAIL:]
    reading.errors = error_lines(lines, frozenset(h.line for h in reading.hits))
    return reading
