"""Facts a pasted log states besides error messages: framework, CUDA and driver versions, the GPUs it names,
``nvidia-smi`` rows (memory held, utilisation) and per-step timing lines that split a step into data wait and
compute.

Pure: reads only the lines given. The doctor shows these facts even when no known message names a cause, and draws
two conclusions from figures alone: a step whose time is mostly data wait is input-bound, and a GPU whose memory is
held at 0% utilisation is idle (weak evidence only: one ``nvidia-smi`` snapshot may fall between two steps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Share of a step spent waiting for data past which the run is input-bound (PyTorch's ImageNet example prints
# "Time 0.154 (8.010) Data 0.001 (7.720)", mmcv "time: 0.512, data_time: 0.403").
INPUT_SHARE = 0.5
# Memory held (MiB) past which a GPU at 0% utilisation is a job's idle GPU rather than an empty one.
IDLE_HELD_MIB = 1024

# Names are delimited by ASCII only: in text written in Chinese or Japanese the character before a name is a word
# character to ``\b`` ("我的tensorflow-gpu=1.13.1").
_VERSION_RES = (
    ("tensorflow", re.compile(r"(?<![A-Za-z0-9_])(?:tensorflow(?:[-_]gpu)?|tensor ?flow)(?: version)?\s*[:=]{0,2}\s*v?"
                              r"(\d+\.\d+(?:\.\d+)?(?:-?rc\d+)?)\b", re.I)),
    ("torch", re.compile(r"(?<![A-Za-z0-9_])(?:pytorch|torch)(?: version)?\s*[:=]{0,2}\s*v?"
                         r"(\d+\.\d+(?:\.\d+)?(?:\+\w+)?)", re.I)),
    ("jax", re.compile(r"(?<![A-Za-z0-9_])jax(?:lib)?(?: version)?\s*[:=]{0,2}\s*v?"
                       r"(\d+\.\d+\.\d+(?:\+[\w.]+)?)", re.I)),
)
# A REPL's or notebook's answer to `tf.__version__` / `torch.__version__` on the next line ("'2.15.0'", "Out[2]: ...").
_VERSION_ASKED = re.compile(r"\b(tf|tensorflow|torch|jax)\.__version__\)?\s*$")
_VERSION_ANSWER = re.compile(r"^(?:Out\[\d+\]:\s*)?['\"]?(\d+\.\d+(?:\.\d+)?(?:\+\w+)?)['\"]?\s*$")
_SMI_HEADER = re.compile(r"NVIDIA-SMI ([\d.]+)\s+Driver Version: ([\d.]+)(?:\s+CUDA Version: ([\d.]+))?")
_DRIVER = re.compile(r"\b(?:NVIDIA )?driver(?: version)?\s*[:=]?\s*v?(\d{3}\.\d{1,3}(?:\.\d+)?)\b", re.I)
_SMI_NAME = re.compile(r"^\|\s+(\d+)\s+((?:NVIDIA|Tesla|GeForce|Quadro|TITAN|RTX|GRID)[^|]*?)\s{2,}")
_SMI_MEM = re.compile(r"\|\s+(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\d+|N/A)\s*%?")
_SMI_PROCESSES = re.compile(r"^\|\s+Processes:")
_SMI_NO_PROCESSES = re.compile(r"No running processes found")
# A Processes row: GPU, (GI, CI on newer drivers), PID, type, name, memory
# ("|    0   N/A  N/A   1234   C   python   5369MiB |").
_SMI_PROCESS_ROW = re.compile(r"^\|\s+\d+\s+(?:N/A\s+N/A\s+|\d+\s+\d+\s+)?(?:\d+|N/A)\s+[CGM+]+\s+\S.*?"
                              r"(?:\d+\s*MiB|N/A)\s*\|")
_GPU_NAME = re.compile(r"(?:name: |Found GPU\d+ |Device \d+: \"?)((?:NVIDIA |GeForce |Tesla |Quadro |TITAN |GRID )"
                       r"[\w .-]+?)(?= major:| which| computeCapability|\"|,|$)"
                       r"|((?:NVIDIA )?(?:GeForce |Tesla |Quadro |TITAN |RTX |A\d+)[\w .-]*?) with CUDA capability")
_STEP_TIMES = (
    re.compile(r"\bTime\s+([\d.]+)\s+\(([\d.]+)\)\s+Data\s+([\d.]+)\s+\(([\d.]+)\)"),
    re.compile(r"\btime: ([\d.]+), data_time: ([\d.]+)"),
)
_RATE = re.compile(r"([\d.]+)\s*(examples/sec|images/sec|samples/sec|sec/batch|it/s|s/it)\b")


@dataclass(frozen=True)
class SmiRow:
    """One GPU of an ``nvidia-smi`` table: memory used and total (MiB), utilisation (%, None when N/A)."""

    index: int
    used_mib: int
    total_mib: int
    util: int | None


@dataclass
class LogFacts:
    """What the log states about its setting.

    Attributes:
        versions: ``{"tensorflow"|"torch"|"jax"|"driver"|"cuda": version}`` as printed (CUDA: the highest the driver
            supports, from the ``nvidia-smi`` header).
        gpus: GPU names the log shows, in order of appearance.
        smi: ``nvidia-smi`` rows.
        smi_processes: processes ``nvidia-smi``'s Processes section lists (0 when it lists none), None when the log
            has no such section.
        data_share: the last step-timing line's data wait over step time (0-1), or None.
        step_line: that line (1-based) and its text.
        rates: throughput figures as printed (``"512.3 images/sec"``), the last few.
    """

    versions: dict[str, str] = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)
    smi: list[SmiRow] = field(default_factory=list)
    smi_processes: int | None = None
    data_share: float | None = None
    step_line: tuple[int, str] | None = None
    rates: list[str] = field(default_factory=list)

    def idle_gpus(self) -> list[SmiRow]:
        """GPUs holding memory at 0% utilisation."""
        return [r for r in self.smi if r.util == 0 and r.used_mib >= IDLE_HELD_MIB]


def _versions(facts: LogFacts, line: str) -> None:
    for name, regex in _VERSION_RES:
        m = regex.search(line)
        if m and name not in facts.versions:
            facts.versions[name] = m.group(1)
    header = _SMI_HEADER.search(line)
    if header:
        facts.versions.setdefault("driver", header.group(2))
        if header.group(3):
            facts.versions.setdefault("cuda", header.group(3))
    driver = _DRIVER.search(line)
    if driver:
        facts.versions.setdefault("driver", driver.group(1))


def _gpu_names(facts: LogFacts, line: str, smi_index: list[int]) -> None:
    name_row = _SMI_NAME.match(line)
    if name_row:
        smi_index[0] = int(name_row.group(1))
        name = name_row.group(2).strip()
    else:
        m = _GPU_NAME.search(line)
        name = (m.group(1) or m.group(2)).strip() if m else ""
    if name and name not in facts.gpus:
        facts.gpus.append(name)


def _timing(facts: LogFacts, line: str, number: int) -> None:
    for regex in _STEP_TIMES:
        m = regex.search(line)
        if not m:
            continue
        figures = [float(x) for x in m.groups()]
        step, data = (figures[1], figures[3]) if len(figures) == 4 else (figures[0], figures[1])
        if step > 0:
            facts.data_share = min(1.0, data / step)
            facts.step_line = (number, line.strip()[:200])
    for value, unit in _RATE.findall(line):
        facts.rates = (facts.rates + [f"{value} {unit}"])[-3:]


def read_facts(lines: list[str]) -> LogFacts:
    """The facts of a log (its lines, without colour codes)."""
    facts = LogFacts()
    smi_index = [-1]
    in_processes = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if _SMI_PROCESSES.match(line.strip()):
            in_processes, facts.smi_processes = True, facts.smi_processes or 0
            continue
        if in_processes:
            if not line.strip().startswith(("|", "+")):
                in_processes = False
            elif _SMI_PROCESS_ROW.match(line.strip()) and not _SMI_NO_PROCESSES.search(line):
                facts.smi_processes = (facts.smi_processes or 0) + 1
                continue
        _versions(facts, line)
        asked = _VERSION_ASKED.search(line)
        answer = _VERSION_ANSWER.match(lines[number].strip()) if asked and number < len(lines) else None
        if answer:
            facts.versions.setdefault({"tf": "tensorflow"}.get(asked.group(1), asked.group(1)), answer.group(1))
        _gpu_names(facts, line, smi_index)
        mem = _SMI_MEM.search(line)
        if mem and smi_index[0] >= 0:
            util = None if mem.group(3) == "N/A" else int(mem.group(3))
            facts.smi.append(SmiRow(smi_index[0], int(mem.group(1)), int(mem.group(2)), util))
        _timing(facts, line, number)
    return facts


def fact_notes(facts: LogFacts) -> list[str]:
    """One line each for what the log states: versions, GPUs, nvidia-smi memory and utilisation, throughput."""
    notes = []
    if facts.versions:
        notes.append("Versions in the log: " + ", ".join(f"{k} {v}" for k, v in facts.versions.items()) + ".")
    if facts.gpus:
        notes.append("GPUs named in the log: " + ", ".join(facts.gpus[:8]) + ".")
    for row in facts.smi[:8]:
        util = "N/A" if row.util is None else f"{row.util}%"
        idle = " (memory held while idle)" if row in facts.idle_gpus() else ""
        notes.append(f"nvidia-smi: GPU {row.index} uses {row.used_mib} of {row.total_mib} MiB at {util} "
                     f"utilisation{idle}.")
    if facts.smi_processes is not None:
        notes.append("nvidia-smi's Processes section lists " + (f"{facts.smi_processes} process(es)."
                                                                   if facts.smi_processes else "no process."))
    if facts.data_share is not None:
        notes.append(f"Step timing: {facts.data_share:.0%} of a step waits for data.")
    if facts.rates:
        notes.append("Throughput in the log: " + ", ".join(facts.rates) + ".")
    return notes
