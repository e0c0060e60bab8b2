"""The environment blocks a pasted log carries beside (or instead of) a run's messages, read as settings: PyTorch's
``python -m torch.utils.collect_env`` report, package lists (``pip list``, ``pip freeze``, ``conda list``, ``pip
show``, collect_env's ``[pip3]``/``[conda]`` lines, pip's "Successfully installed ..."), and ONNX Runtime's execution
providers and memory arenas.

Many pastes in "GPU not used" threads are only such a block: no message names a cause, but the block states the
setting that does. What each block means is a fact of the tool that prints it:

- collect_env prints ``CUDA used to build PyTorch: None`` (older: ``Could not collect``) when ``torch.version.cuda``
  is None, i.e. a CPU build (unless ``ROCM used to build PyTorch`` names a version); ``Nvidia driver version`` and
  ``GPU models and configuration`` are ``Could not collect`` / ``No CUDA`` when ``nvidia-smi`` found no driver.
- PyTorch's CPU wheels carry ``+cpu``; conda's CPU builds ``cpu_`` in their build string or the ``cpuonly`` package.
- The pip package ``tensorflow`` up to 2.0 is CPU-only (``tensorflow-gpu`` was the GPU one; 1.15.0 alone had both;
  TensorFlow's install guide); conda's TensorFlow builds say ``gpu_`` or ``mkl_``/``eigen_`` in their build string.
- ``tensorflow-intel`` is the package TensorFlow >= 2.11 installs on native Windows, which has no GPU support.
- ONNX Runtime lists ``CUDAExecutionProvider`` among its available providers whenever the installed package is a
  GPU build (availability is the build's, not the machine's): a list without it is the CPU package.
- A ``jaxlib`` without ``+cuda`` and without a ``jax-cuda*-plugin`` beside it has no GPU backend.
- ``paddlepaddle``, ``onnxruntime`` and ``mxnet`` are CPU builds whose CUDA builds are other packages
  (``paddlepaddle-gpu``, ``onnxruntime-gpu``, ``mxnet-cu<version>``); ``tensorflow-cpu`` names itself.

Each cause drawn here is one that public threads settle (a maintainer or answerer naming the package or build). The
verdict uses these causes only when no known message names one, as lower-confidence findings. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from allgpu.doctor.log_setting import CPU_FLAVOURS

Evidence = tuple[str, float, str, str, tuple[str, ...]]
WEIGHT = 0.6  # the verdict's threshold: enough to name a cause alone, below every known message that settles one

# Packages whose name and version say something about the GPU (anything else in a list is ignored).
_NAMES = re.compile(r"^(?:torch|pytorch|pytorch-cuda|cpuonly|cudatoolkit|tensorflow(?:[-_](?:gpu|cpu|intel))?|"
                    r"jax|jaxlib|jax[-_]cuda\d+[-_](?:plugin|pjrt)|onnxruntime(?:[-_](?:gpu|directml))?|"
                    r"paddlepaddle(?:[-_]gpu)?|mxnet(?:[-_]cu\d+)?)$", re.I)
_VERSION = r"v?(\d+(?:\.\d+)+[\w.+!-]*)"
# `name version [build [channel]]` (pip list, conda list), `name==version` (pip freeze), `[pip3] name==version`,
# `[conda] name version build channel` (collect_env).
_PACKAGE_LINE = re.compile(r"^\s*(?:\[(?:pip\d?|conda)\]\s+)?([A-Za-z][\w.-]*)\s*(?:==|\s)\s*" + _VERSION
                           + r"(?:\s+(\S+))?(?:\s+\S+)?\s*$")
_INSTALLED = re.compile(r"Successfully installed (.+)$")
_PIP_SHOW = re.compile(r"^Name: ([\w.-]+)\s*$")
_PIP_SHOW_VERSION = re.compile(r"^Version: " + _VERSION)
# collect_env's "Field: value" lines (the fields this module reads).
_COLLECT_FIELDS = ("PyTorch version", "CUDA used to build PyTorch", "ROCM used to build PyTorch", "OS",
                   "Is CUDA available", "CUDA runtime version", "GPU models and configuration",
                   "Nvidia driver version")
_COLLECT = re.compile(r"^\s*>?\s*(" + "|".join(re.escape(f) for f in _COLLECT_FIELDS) + r")\s*:\s*(.*?)\s*$")
_NONE = ("none", "could not collect", "no cuda", "n/a", "")
# ONNX Runtime: get_available_providers() output, and the verbose log's arena lines ("Extending BFCArena for Cpu").
_PROVIDERS = re.compile(r"\[((?:\s*'\w+ExecutionProvider',?)+)\s*\]")
_ARENA = re.compile(r"Extending BFCArena for (\w+)")


@dataclass(frozen=True)
class Package:
    """One package line: name (lower case, ``_`` as ``-``), version, conda build string ('' for pip), line."""

    name: str
    version: str
    build: str
    line: int


@dataclass
class EnvBlocks:
    """The environment blocks read from a log.

    Attributes:
        collect_env: collect_env's fields (``{"PyTorch version": "2.0.1+cpu", ...}``), empty when the log has none.
        collect_env_line: the line (1-based) of its first field, or None.
        packages: GPU-relevant packages listed, by name (the first line naming each).
        providers: ONNX Runtime's execution providers as printed, and the line, or None.
        arenas: the devices ONNX Runtime's arenas extend for (``{"Cpu"}``), and the first such line.
    """

    collect_env: dict[str, str] = field(default_factory=dict)
    collect_env_line: int | None = None
    packages: dict[str, Package] = field(default_factory=dict)
    providers: tuple[tuple[str, ...], int] | None = None
    arenas: tuple[set[str], int] | None = None


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def _add(blocks: EnvBlocks, name: str, version: str, build: str, line: int) -> None:
    if _NAMES.match(name) and _norm(name) not in blocks.packages:
        blocks.packages[_norm(name)] = Package(_norm(name), version, build or "", line)


def read_blocks(lines: list[str]) -> EnvBlocks:
    """The environment blocks in ``lines`` (a log without colour codes)."""
    blocks = EnvBlocks()
    shown: str | None = None
    for i, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        m = _COLLECT.match(line)
        if m:
            blocks.collect_env.setdefault(m.group(1), m.group(2))
            blocks.collect_env_line = blocks.collect_env_line or i
            continue
        m = _PACKAGE_LINE.match(line)
        if m:
            _add(blocks, m.group(1), m.group(2), m.group(3) or "", i)
        installed = _INSTALLED.search(line)
        for token in installed.group(1).split() if installed else ():
            parts = re.match(r"([A-Za-z][\w.-]*?)-(\d[\w.+!]*)$", token)
            if parts:
                _add(blocks, parts.group(1), parts.group(2), "", i)
        if shown and _PIP_SHOW_VERSION.match(line):
            _add(blocks, shown, _PIP_SHOW_VERSION.match(line).group(1), "", i)
        shown = _PIP_SHOW.match(line).group(1) if _PIP_SHOW.match(line) else None
        providers = _PROVIDERS.search(line)
        if providers and blocks.providers is None:
            blocks.providers = (tuple(re.findall(r"(\w+ExecutionProvider)", providers.group(1))), i)
        arena = _ARENA.search(line)
        if arena:
            seen = blocks.arenas or (set(), i)
            seen[0].add(arena.group(1))
            blocks.arenas = seen
    return blocks


def _release(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _is_none(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _NONE


def _torch_cpu(blocks: EnvBlocks) -> str | None:
    """Where the blocks show a CPU build of PyTorch, or None."""
    env = blocks.collect_env
    if env.get("PyTorch version", "").endswith("+cpu"):
        return f"collect_env: PyTorch version: {env['PyTorch version']}"
    rocm = env.get("ROCM used to build PyTorch")
    no_rocm = rocm is None or _is_none(rocm)
    if _is_none(env.get("CUDA used to build PyTorch")) and no_rocm and "PyTorch version" in env:
        return (f"collect_env: CUDA used to build PyTorch: {env['CUDA used to build PyTorch']} (torch.version.cuda "
                "is None: a CPU build)")
    for name in ("torch", "pytorch"):
        pkg = blocks.packages.get(name)
        if pkg and (pkg.version.endswith("+cpu") or re.match(r"cpu_|py\d+\.?\d*_cpu", pkg.build)):
            return f"line {pkg.line}: {name} {pkg.version} {pkg.build}".rstrip() + " (a CPU build)"
    if "cpuonly" in blocks.packages:
        return f"line {blocks.packages['cpuonly'].line}: cpuonly (conda's marker of CPU-only PyTorch)"
    return None


def _collect_env_no_driver(blocks: EnvBlocks) -> str | None:
    env = blocks.collect_env
    available = env.get("Is CUDA available", "").lower()
    build = env.get("CUDA used to build PyTorch")
    if available not in ("false", "no") or build is None or _is_none(build):
        return None
    if _is_none(env.get("Nvidia driver version", "")) and _is_none(env.get("GPU models and configuration", "")):
        return (f"collect_env: PyTorch built for CUDA {build}, CUDA not available, and no NVIDIA driver or GPU "
                "collected (nvidia-smi found no driver)")
    return None


def _tensorflow_cpu(blocks: EnvBlocks) -> tuple[str, tuple[str, ...]] | None:
    packages = blocks.packages
    intel = packages.get("tensorflow-intel")
    if intel:
        return (f"line {intel.line}: tensorflow-intel {intel.version} (TensorFlow >= 2.11 on native Windows, which "
                "has no GPU support; 2.10 was the last)", ())
    tf = packages.get("tensorflow")
    release = _release(tf.version) if tf else None
    if not tf or not release or release >= (2, 1) or tf.version.startswith("1.15.0") or "gpu" in tf.build.lower():
        return None
    if "tensorflow-gpu" in packages:
        return (f"line {tf.line}: tensorflow {tf.version} beside tensorflow-gpu: both install the same module and the "
                "CPU package can shadow the GPU one (pip uninstall tensorflow)", ("missing-cuda-libs",))
    return (f"line {tf.line}: tensorflow {tf.version} {tf.build}".rstrip() + " (up to 2.0 the pip package "
            "`tensorflow` is CPU-only; the GPU one is tensorflow-gpu)", ())


def _onnxruntime_cpu(blocks: EnvBlocks) -> str | None:
    if blocks.providers and blocks.providers[0]:
        names, line = blocks.providers
        if "CUDAExecutionProvider" not in names and "TensorrtExecutionProvider" not in names:
            return (f"line {line}: ONNX Runtime's providers are {', '.join(names)} (a GPU package always lists "
                    "CUDAExecutionProvider: this is the CPU package onnxruntime)")
    if blocks.arenas and blocks.arenas[0] == {"Cpu"}:
        return (f"line {blocks.arenas[1]}: ONNX Runtime extends memory arenas for the CPU only (a session on the GPU "
                "extends a Cuda arena)")
    return None


def _cpu_flavour(blocks: EnvBlocks) -> str | None:
    for flavour in CPU_FLAVOURS:
        pkg = blocks.packages.get(flavour.name)
        gpu = flavour.gpu and re.compile(flavour.gpu)
        if pkg and not (gpu and any(gpu.fullmatch(other) for other in blocks.packages)):
            return (f"line {pkg.line}: {flavour.name} {pkg.version} and no GPU flavour of it listed (the CUDA build "
                    "is a separate package" + (f": {flavour.gpu.replace(chr(92) + 'd+', '<version>')})"
                                               if flavour.gpu else ")"))
    return None


def _jax_cpu(blocks: EnvBlocks) -> str | None:
    jaxlib = blocks.packages.get("jaxlib")
    if not jaxlib or "cuda" in jaxlib.version.lower() or "cuda" in jaxlib.build.lower():
        return None
    if any(name.startswith("jax-cuda") for name in blocks.packages):
        return None
    return f"line {jaxlib.line}: jaxlib {jaxlib.version} with no jax-cuda plugin beside it (a CPU-only JAX)"


def block_evidence(blocks: EnvBlocks, registered: bool) -> list[Evidence]:
    """Causes the environment blocks state, for the verdict's fallback (none when the log shows a GPU registered)."""
    if registered or blocks.collect_env.get("Is CUDA available", "").lower() in ("true", "yes"):
        return []
    out: list[Evidence] = []
    torch_cpu = _torch_cpu(blocks)
    if torch_cpu:
        out.append(("cpu-build", WEIGHT, "env-torch-cpu", torch_cpu, ()))
    no_driver = _collect_env_no_driver(blocks)
    if no_driver:
        out.append(("no-driver", WEIGHT, "env-no-driver", no_driver, ("devices-hidden",)))
    tf_cpu = _tensorflow_cpu(blocks)
    if tf_cpu:
        out.append(("cpu-build", WEIGHT, "env-tensorflow-cpu", tf_cpu[0], tf_cpu[1]))
    for source, text in (("env-onnxruntime-cpu", _onnxruntime_cpu(blocks)), ("env-jax-cpu", _jax_cpu(blocks)),
                         ("env-cpu-flavour", _cpu_flavour(blocks))):
        if text:
            out.append(("cpu-build", WEIGHT, source, text, ("missing-cuda-libs",)))
    return out


def block_notes(blocks: EnvBlocks) -> list[str]:
    """One line per block read: what it says about the GPU, whether or not it names a cause."""
    notes = []
    env = blocks.collect_env
    if env:
        shown = "; ".join(f"{k}: {env[k]}" for k in ("PyTorch version", "CUDA used to build PyTorch",
                                                      "Is CUDA available", "Nvidia driver version",
                                                      "GPU models and configuration") if k in env)
        notes.append(f"Read a torch.utils.collect_env report (line {blocks.collect_env_line}): {shown}.")
    if blocks.packages:
        listed = ", ".join(f"{p.name} {p.version}" + (f" ({p.build})" if p.build else "")
                           for p in list(blocks.packages.values())[:8])
        notes.append(f"Packages the log lists: {listed}.")
    if blocks.providers:
        notes.append(f"ONNX Runtime's providers (line {blocks.providers[1]}): {', '.join(blocks.providers[0])}.")
    return notes
