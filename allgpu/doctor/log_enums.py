"""The status-enum reader of ``allgpu doctor --log``: every member of CUDA's, HIP's, NVML's and NCCL's error enums
(:mod:`allgpu.doctor.log_enum_tables`), read by its name, its number or its text, whatever wording wraps it.

Real logs print one status in many ways: ``cudaErrorNoDevice``, ``CUDA_ERROR_NO_DEVICE``, ``cuda runtime error
(38)``, ``CUDA error 100``, ``(100 vs. 0)``, ``code=100(cudaErrorNoDevice)``, ``CUDA error: no CUDA-capable device
is detected``, ``GPUassert: invalid device function``. The exact readers know some of these lines one by one; this
reader knows the enums whole, so that a library nobody has seen yet, printing a member nobody has seen yet, is
still read.

A number is read only where a CUDA error's number is printed (``cuda runtime error (N)``, ``error=N``, ``(N vs.
0)``, ``code=N``, ``CUDA error N``, ``error code N`` after CUDA, ``Error N:``, ``CudaAPIError: [N]``,
``CUDA failure N``) and resolved in both numberings: the number CUDA >= 10.1 gives a member, else the one older
runtimes gave it (30 is ``cudaErrorUnknown`` only there); a name or text on the same line decides first. Texts are
read only on a line that names CUDA, HIP, NVML or NCCL (``out of memory`` alone is anyone's).

Pure: reads only the lines given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from allgpu.doctor.log_enum_tables import CUDA, NCCL, NVML, Member

_BY_NAME = {name.lower(): (api, m) for api, table in (("CUDA", CUDA), ("NVML", NVML), ("NCCL", NCCL))
            for m in table for name in m.names}
_BY_NUMBER = {m.number: m for m in CUDA if m.number is not None}
_BY_LEGACY = {m.legacy: m for m in CUDA if m.legacy is not None}
# Numbers CUDA >= 10.1 gives only to deprecated profiler statuses that are never returned (5-8): the legacy member.
_DEPRECATED = frozenset({5, 6, 7, 8})

_NAME = re.compile(r"\b(cudaError[A-Z]\w+|CUDA_ERROR_[A-Z_]+|hipError[A-Z]\w+|NVML_ERROR_[A-Z_]+|NVMLError_\w+|"
                   r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError))\b")
_NUMBER = re.compile(
    r"cuda runtime error \((\d{1,4})\)|\bTHCudaCheck FAIL\b.*?\berror=(\d{1,4})\b|\((\d{1,4}) vs\. 0\)|"
    r"\bcode=(\d{1,4})\b|\b(?:CUDA|Cuda|cuda|HIP) (?:error|Error|ERROR|failure|Failure)\W{0,3}(?:code\W{0,3})?\(?"
    r"(\d{1,4})\b(?!\.\d)|\b(?:CUDA|Cuda|cuda|cu[A-Z]\w*|cuda[A-Z]\w*)\b.{0,60}?\berror code\W{0,3}(\d{1,4})\b|"
    r"\bcuda\w*\(\).{0,80}?\bError (\d{1,4}): |CudaAPIError: \[(\d{1,4})\]|\bcudaError_t\W{0,3}(\d{1,4})\b")
_CONTEXT = {
    "CUDA": re.compile(r"\b(?:CUDA|Cuda|cuda|HIP|hip|ROCm|GPUassert|THCudaCheck|cudaCheck\w*|cu[A-Z]\w*|"
                       r"cuda[A-Z]\w*|hip[A-Z]\w*|CUresult)\b"),
    "NVML": re.compile(r"\bNVML\b|\bpynvml\b|nvidia-smi", re.IGNORECASE),
    "NCCL": re.compile(r"NCCL|\bnccl\w*"),  # ProcessGroupNCCL.cpp:260, unhandled cuda error
}
# NCCL and NVML first: their lines often name CUDA too ("unhandled cuda error").
_TEXTS = {api: [(t.lower(), m) for m in table for t in m.texts]
          for api, table in (("NCCL", NCCL), ("NVML", NVML), ("CUDA", CUDA))}
# A math library's status printed as a number ("CUDNN_STATUS_SUCCESS (4 vs. 0)") is not a CUDA error number: the
# math-status family reads those (log_families).
_MATH = re.compile(r"(?:CUDNN|CUBLAS|CUSOLVER|CUSPARSE|CUFFT|CURAND|NCCL|nccl)[A-Z_a-z]*")


@dataclass(frozen=True)
class EnumRead:
    """One status read at one line (1-based): its enum (``CUDA``, ``NVML``, ``NCCL``), canonical name, number as
    printed (or None), how it was read (``name``, ``number``, ``text``), the member and the line's text."""

    line: int
    api: str
    name: str
    number: int | None
    via: str
    member: Member
    text: str

    @property
    def cause(self) -> str | None:
        return self.member.cause


def _by_number(number: int) -> Member | None:
    current, legacy = _BY_NUMBER.get(number), _BY_LEGACY.get(number)
    if current is not None and number not in _DEPRECATED:
        if legacy is not None and current.cause is None and legacy.cause is not None:
            return legacy  # 30 is cudaErrorUnknown in older runtimes and nothing that is a cause in newer ones
        return current
    return legacy


def _by_text(line: str) -> tuple[str, Member] | None:
    low = line.lower()
    for api, texts in _TEXTS.items():
        if not _CONTEXT[api].search(line):
            continue
        best = max(((t, m) for t, m in texts if t in low), key=lambda tm: len(tm[0]), default=None)
        if best:
            return api, best[1]
    return None


def _read_line(line: str) -> tuple[str, Member, int | None, str] | None:
    """``(api, member, number, via)`` for the first status a line carries: by name, then text, then number."""
    numbers = _NUMBER.search(line) if _CONTEXT["CUDA"].search(line) and not _MATH.search(line) else None
    number = next((int(g) for g in numbers.groups() if g is not None), None) if numbers else None
    named = _NAME.search(line)
    if named and named.group(1).lower() in _BY_NAME:
        api, member = _BY_NAME[named.group(1).lower()]
        return api, member, number, "name"
    texted = _by_text(line)
    if texted:
        return texted[0], texted[1], number, "text"
    if number is not None:
        member = _by_number(number)
        if member is not None:
            return "CUDA", member, number, "number"
    return None


def read_enums(lines: list[str]) -> list[EnumRead]:
    """Every status read in ``lines``, in line order, at most one per line."""
    reads = []
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        got = _read_line(line)
        if got:
            api, member, number, via = got
            reads.append(EnumRead(i + 1, api, member.names[0], number, via, member, line[:160]))
    return reads


def enum_notes(reads: list[EnumRead]) -> list[str]:
    """One line per distinct status read, saying what it is and whether it names a cause."""
    notes, seen = [], set()
    for r in reads:
        if r.name in seen:
            continue
        seen.add(r.name)
        shown = r.number if r.number is not None else (r.member.number if r.member.number is not None
                                                         else r.member.legacy)
        number = f" ({shown})"
        said = f"{r.api} status read at line {r.line}: {r.name}{number}, '{r.member.texts[0]}'"
        if r.cause is None:
            notes.append(said + ": threads settle it as a bug in a kernel or the hardware, not a setup cause; no "
                                "cause named from it.")
        elif r.member.also:
            notes.append(said + f": settled as {r.cause} or {', '.join(r.member.also)} in different threads.")
        else:
            notes.append(said + f": settled as {r.cause}.")
    return notes[:6]
