"""The setting a pasted log shows, read from any line rather than from known messages: the operating system
(native Windows, WSL2, Colab, macOS), the frameworks that appear (tracebacks' paths, imports, version prints), the
CUDA each framework was built for (``torch 2.1.0+cu121``, ``CUDA used to build PyTorch: 12.1``, the CUDA runtime
TensorFlow opened, ``libcudart.so.11.0`` / ``cudart64_110.dll``), the CUDA the driver supports (``nvidia-smi``'s
header) and the devices the log names (``cuda:1``, ``/gpu:0``).

Pure: reads only the lines given. :mod:`allgpu.doctor.log_evidence` draws causes from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_WINDOWS = re.compile(r"[A-Z]:\\\\?(?:Users|Program|Python|ProgramData|Anaconda|Miniconda|tools|tf_jenkins|a\\\\?_work)"
                      r"|\\site-packages\\|\bWinError\b|\.exe\b|\bwin(?:32|_amd64|-amd64)\b|native Windows|"
                      r"\bWindows (?:10|11|Server)|\bPS [A-Z]:\\|\bnvcuda\.dll\b|\b\w+64_\d+\.dll\b", re.I)
# WSL2: its driver directory, kernel name, the Windows drives mounted at /mnt/c, the \\wsl$ share.
_WSL = re.compile(r"/usr/lib/wsl/|microsoft-standard-WSL|\bWSL ?2?\b|\bwsl\b|(?:^|[\s\"'(])/mnt/[a-z]/|"
                  r"\\\\wsl(?:\$|\.localhost)", re.I)
# WSL1's kernel ("4.4.0-19041-Microsoft"): no GPU at all under WSL1.
_WSL1 = re.compile(r"\b\d+\.\d+\.\d+-\d+-Microsoft\b")
_COLAB = re.compile(r"google\.colab|/content/|colab\.research\.google|Colab(?:oratory)?\b", re.I)
_MACOS = re.compile(r"\bmacOS\b|\bDarwin\b|/Users/\w+/(?:opt|miniforge|Library)|\bApple M\d\b|\bmps\b|/opt/homebrew/|"
                    r"\.dylib\b|\bmacosx_\d+_\d+|\barm64-apple-darwin", re.I)
_FRAMEWORKS = (
    ("pytorch", re.compile(r"site-packages[/\\]torch[/\\]|\b(?:import|from) torch\b|\btorch\.\w|\btorch==|"
                           r"\bpytorch\b", re.I)),
    ("tensorflow", re.compile(r"site-packages[/\\]tensorflow|\b(?:import|from) tensorflow\b|\btf\.(?:config|test|keras|"
                              r"distribute|data)\b|\btensorflow(?:-gpu|-cpu)?(?:==| version)|Using TensorFlow "
                              r"backend|tensorflow/(?:core|stream_executor|python)", re.I)),
    ("jax", re.compile(r"site-packages[/\\]jax(?:lib)?[/\\]|\b(?:import|from) jax\b|\bjax\.(?:devices|numpy)|"
                       r"\bjaxlib\b", re.I)),
    ("numba", re.compile(r"site-packages[/\\]numba(?:_cuda)?[/\\]|\bimport numba\b|\bnumba\.cuda\b", re.I)),
    ("cupy", re.compile(r"site-packages[/\\]cupy[/\\]|\bimport cupy\b|\bcupy\.cuda\b", re.I)),
    # R's torch package (mlverse): its R calls, e.g. torch::cuda_is_available(), library(torch), install_torch();
    # not libtorch's C++ (torch::cuda::is_available(), torch::kCUDA, torch::Tensor, torch::jit::load).
    ("rtorch", re.compile(r"\btorch::(?!\w+::|k[A-Z]|Tensor\b|Device\b)\w|\b(?:library|require)\(torch\)|"
                          r"\binstall_torch\(")),
    ("keras", re.compile(r"site-packages[/\\]keras[/\\]|\bimport keras\b|\bKERAS_BACKEND\b|Using \w+ backend", re.I)),
)
_TORCH_BUILD = re.compile(r"\b(?:torch|pytorch)\S*\s*[=:v ]{0,4}\d+\.\d+(?:\.\d+)?\+cu(\d{2,3})\b|"
                          r"CUDA used to build PyTorch: ([\d.]+)|\b\d+\.\d+\.\d+\+cu(\d{2,3})\b", re.I)
# collect_env prints "None" (older releases "Could not collect") when torch.version.cuda is None: a CPU build.
_TORCH_CPU = re.compile(r"\b\d+\.\d+(?:\.\d+)?\+cpu\b|CUDA used to build PyTorch: (?:None|Could not collect)|"
                        r"\bpy\d\.?\d+_cpu_\d\b|"
                        r"\bcpuonly\b", re.I)


@dataclass(frozen=True)
class CpuFlavour:
    """A package whose name says it is a CPU-only build: ``name`` as a list prints it, ``gpu`` the GPU flavour that,
    when listed too, clears it (a regex over names spelled with ``-``; None when ``name`` names its CPU build itself).
    The one table both the setting (any line) and the package lists (:mod:`allgpu.doctor.log_blocks`) read."""

    name: str
    gpu: str | None = None

    @property
    def listed(self) -> re.Pattern[str]:
        """The CPU package named in any line: with a version when its name is also the GPU build's base name."""
        spelled = re.escape(self.name).replace(r"\-", "[-_]")
        if self.gpu is None:
            return re.compile(r"\b" + spelled + (r"\b" if self.name[-1].isalnum() else ""), re.I)
        return re.compile(r"(?<![\w-])" + spelled + r"(?:==|\s+)v?\d", re.I)

    def gpu_named(self, with_version: bool = False) -> re.Pattern[str] | None:
        """The GPU flavour named in any line (``with_version``: as a package line, ``name==1.2`` / ``name 1.2``)."""
        if self.gpu is None:
            return None
        return re.compile(self.gpu.replace("-", "[-_]") + (r"(?:==|\s+)v?\d" if with_version else ""), re.I)


# Packages named with their CPU-only flavour (the CUDA build is another package: paddlepaddle-gpu, onnxruntime-gpu,
# mxnet-cu<version>; tensorflow-cpu and jax[cpu] name themselves).
CPU_FLAVOURS = (CpuFlavour("tensorflow-cpu"), CpuFlavour("paddlepaddle", "paddlepaddle-gpu"),
                CpuFlavour("onnxruntime", "onnxruntime-gpu"), CpuFlavour("mxnet", r"mxnet-cu\d+"),
                CpuFlavour("jax[cpu]"))
# Both flavours installed (pip list / conda list lines): they install the same module and the CPU one can answer
# (ONNX Runtime's maintainers, microsoft/onnxruntime#7748 and #10685; Paddle's paddlepaddle vs paddlepaddle-gpu).
_BOTH_FLAVOURS = tuple(f for f in CPU_FLAVOURS if f.name in ("onnxruntime", "paddlepaddle"))
# Signs the run is inside a container (a shell prompt of a container id, docker commands, Kubernetes).
_CONTAINER = re.compile(r"\b(?:nvidia-)?docker (?:run|exec|compose|container|start)\b|\bnvidia-docker\b|/\.dockerenv|"
                        r"\bkubectl\b|\bpodman (?:run|exec)\b|^root@[0-9a-f]{12}:", re.I | re.M)
# The compute capability a framework prints for a GPU it found (TensorFlow's device lines, deviceQuery).
_CAPABILITY = re.compile(r"compute ?capability:? (\d{1,2})\.(\d)\b", re.I)
# The CUDA other builds name: jaxlib "+cuda12", jax-cuda12-plugin, paddlepaddle-gpu "post117", mxnet-cu102.
_OTHER_BUILD = re.compile(r"jaxlib(?:==|\s+)?[\d.]*\+cuda(\d{2})|jax[-_]cuda(\d{2})[-_]plugin|jax\[cuda(\d{2})|"
                          r"paddlepaddle[-_]gpu(?:==|\s+)?[\d.]*?\.?post(\d{2,3})\b|mxnet[-_]cu(\d{2,3})\b", re.I)
# The oldest Linux driver of each CUDA release (NVIDIA's CUDA release notes, table 3), newest first.
_DRIVER_CUDA = (((570, 26), "12.8"), ((560, 28), "12.6"), ((555, 42), "12.5"), ((550, 54), "12.4"),
                ((545, 23), "12.3"), ((535, 54), "12.2"), ((530, 30), "12.1"), ((525, 60), "12.0"),
                ((520, 61), "11.8"), ((515, 43), "11.7"), ((510, 39), "11.6"), ((495, 29), "11.5"),
                ((470, 42), "11.4"), ((465, 19), "11.3"), ((460, 27), "11.2"), ((455, 23), "11.1"),
                ((450, 36), "11.0"), ((440, 33), "10.2"), ((418, 39), "10.1"), ((410, 48), "10.0"),
                ((396, 26), "9.2"), ((390, 46), "9.1"), ((384, 81), "9.0"), ((367, 48), "8.0"))
_TF_RUNTIME = re.compile(r"(?:libcudart\.so\.|cudart64_)(\d+)(?:\.(\d+))?")
_DEVICE = re.compile(r"\b(cuda:\d+|/?(?:device:)?GPU:\d+)\b", re.I)
# GPUs by architecture, with the first CUDA release that has kernels for it (Ampere 11.0, Ada and Hopper 11.8,
# Blackwell 12.8; builds of CUDA 11.x run Ada and Hopper through PTX, so only the major is compared for those). Short
# names (A2, A10, L4 ...) only with a vendor prefix or a model suffix, so that they are not read from other text.
_NAME_START, _NAME_END = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"
_GPU_ARCH = (
    ("Ampere", (11, 0), re.compile(_NAME_START + r"(?:A100|A800|RTX ?30[5-9]0(?: ?Ti)?|RTX A[2-6]000)" + _NAME_END
                                   + r"|(?:NVIDIA|Tesla) (?:A2|A10G?|A16|A30|A40)\b|\bA(?:10G?|30|40)-(?:PCIE|SXM|"
                                   r"\d+GB)", re.I)),
    ("Ada/Hopper", (11, 8), re.compile(_NAME_START + r"(?:H100|H800|H200|GH200|RTX ?40[5-9]0(?: ?Ti| SUPER)?)"
                                       + _NAME_END + r"|NVIDIA (?:L4|L40S?)\b", re.I)),
    ("Blackwell", (12, 8), re.compile(_NAME_START + r"(?:B100|B200|GB200|RTX ?50[5-9]0(?: ?Ti)?)" + _NAME_END
                                      + r"|RTX PRO 6000 Blackwell", re.I)),
)
# The CUDA each TensorFlow release was built with (tensorflow.org's tested build configurations).
_TF_BUILD_CUDA = ((1, 5, "9.0"), (1, 13, "10.0"), (2, 1, "10.1"), (2, 4, "11.0"), (2, 5, "11.2"), (2, 12, "11.8"),
                  (2, 15, "12.2"), (2, 16, "12.3"))


def cuda_from_tag(tag: str) -> str:
    """``"121"`` -> ``"12.1"``, ``"92"`` -> ``"9.2"`` (the digits of PyTorch's ``+cu121``-style tags)."""
    return f"{tag[:-1]}.{tag[-1]}"


@dataclass
class Setting:
    """What a log shows about where it ran.

    Attributes:
        os: ``"windows"``, ``"wsl"`` (WSL2), ``"wsl1"``, ``"colab"``, ``"macos"`` or None (Linux or unknown).
        frameworks: frameworks the log shows (``"pytorch"``, ``"tensorflow"``, ``"jax"``, ``"keras"``).
        torch_cuda: CUDA version PyTorch was built for (``"12.1"``), ``"cpu"`` for a CPU build, None if unknown.
        tf_cuda: CUDA runtime version TensorFlow tried or opened (``"11.0"``), None if unknown.
        devices: device names the log mentions (``cuda:1``, ``GPU:0``), in order.
        gpu_arch: ``(architecture, first CUDA with kernels for it, the name as printed)`` of the newest GPU the log
            names (Ampere or later), or None.
        cpu_packages: CPU-only packages the log names (``tensorflow-cpu``, ``paddlepaddle`` without
            ``paddlepaddle-gpu``, ``onnxruntime`` without ``onnxruntime-gpu``, ``mxnet`` without ``mxnet-cu<version>``).
        other_cuda: ``(CUDA version, the name as printed)`` a JAX, PaddlePaddle or MXNet build names, or None.
        both_flavours: packages whose CPU and GPU flavours are both listed as installed (``onnxruntime``).
        container: the log shows the run inside a container (docker commands, a container-id prompt, kubectl).
        capability: the compute capability the log prints for a GPU (``(7, 5)``), or None.
    """

    os: str | None = None
    frameworks: set[str] = field(default_factory=set)
    torch_cuda: str | None = None
    tf_cuda: str | None = None
    devices: list[str] = field(default_factory=list)
    gpu_arch: tuple[str, tuple[int, int], str] | None = None
    cpu_packages: list[str] = field(default_factory=list)
    other_cuda: tuple[str, str] | None = None
    both_flavours: list[str] = field(default_factory=list)
    container: bool = False
    capability: tuple[int, int] | None = None


def tf_build_cuda(version: tuple[int, int] | None) -> str | None:
    """The CUDA a TensorFlow release (major, minor) was built with, None before 1.5 or when unknown."""
    found = None
    for major, minor, cuda in _TF_BUILD_CUDA:
        if version and version >= (major, minor):
            found = cuda
    return found


def driver_cuda(driver: str | None) -> str | None:
    """The newest CUDA a driver version (``"470.82.01"``) supports, from NVIDIA's table; None when unknown."""
    parts = re.findall(r"\d+", driver or "")
    if len(parts) < 2:
        return None
    version = (int(parts[0]), int(parts[1]))
    return next((cuda for oldest, cuda in _DRIVER_CUDA if version >= oldest), None)


def _os(text: str) -> str | None:
    if _WSL1.search(text):
        return "wsl1"
    if _WSL.search(text):
        return "wsl"
    if _COLAB.search(text):
        return "colab"
    if _WINDOWS.search(text):
        return "windows"
    if _MACOS.search(text):
        return "macos"
    return None


def read_setting(lines: list[str]) -> Setting:
    """The setting of a log (its lines, without colour codes)."""
    text = "\n".join(lines)
    setting = Setting(os=_os(text))
    setting.frameworks = {name for name, regex in _FRAMEWORKS if regex.search(text)}
    if _TORCH_CPU.search(text):
        setting.torch_cuda = "cpu"
    else:
        m = _TORCH_BUILD.search(text)
        if m:
            setting.torch_cuda = m.group(2) or cuda_from_tag(m.group(1) or m.group(3))
    runtime = _TF_RUNTIME.search(text)
    if runtime:
        major, minor = runtime.groups()
        if minor is None and len(major) >= 3:  # cudart64_110.dll
            major, minor = major[:-1], major[-1]
        setting.tf_cuda = f"{major}.{minor or 0}"
    for m in _DEVICE.finditer(text):
        name = m.group(1).lstrip("/")
        if name not in setting.devices:
            setting.devices.append(name)
    setting.cpu_packages = [f.name for f in CPU_FLAVOURS
                            if f.listed.search(text) and not (f.gpu and f.gpu_named().search(text))]
    setting.both_flavours = [f.name for f in _BOTH_FLAVOURS
                             if f.listed.search(text) and f.gpu_named(with_version=True).search(text)]
    setting.container = bool(_CONTAINER.search(text))
    cap = _CAPABILITY.search(text)
    setting.capability = (int(cap.group(1)), int(cap.group(2))) if cap else None
    other = _OTHER_BUILD.search(text)
    if other:
        tag = next(g for g in other.groups() if g)
        tag = {"97": "90", "107": "100"}.get(tag, tag) if other.group(4) else tag  # Paddle's cuDNN 7 builds
        jax = other.group(4) is None and other.group(5) is None
        setting.other_cuda = (f"{tag}.0" if jax else cuda_from_tag(tag), other.group(0))
    for arch, first_cuda, regex in reversed(_GPU_ARCH):
        m = regex.search(text)
        if m:
            setting.gpu_arch = (arch, first_cuda, m.group(0))
            break
    return setting


def setting_notes(setting: Setting) -> list[str]:
    """One line each for what the setting shows (empty parts left out)."""
    notes = []
    names = {"windows": "native Windows", "wsl": "WSL2", "wsl1": "WSL1 (no GPU support)", "colab": "Google Colab",
             "macos": "macOS"}
    if setting.os:
        notes.append(f"Runs on {names[setting.os]} (from paths and names in the log).")
    builds = []
    if setting.torch_cuda:
        builds.append("PyTorch " + ("CPU build" if setting.torch_cuda == "cpu" else f"built for CUDA "
                                                                                   f"{setting.torch_cuda}"))
    if setting.tf_cuda:
        builds.append(f"TensorFlow looks for CUDA runtime {setting.tf_cuda}")
    if setting.other_cuda:
        builds.append(f"{setting.other_cuda[1]} is built for CUDA {setting.other_cuda[0]}")
    if setting.cpu_packages:
        builds.append("CPU-only packages " + ", ".join(setting.cpu_packages))
    if builds:
        notes.append("Builds in the log: " + "; ".join(builds) + ".")
    if setting.devices:
        notes.append("Devices the log names: " + ", ".join(setting.devices[:8]) + ".")
    return notes
