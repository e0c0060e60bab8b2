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
_COLAB = re.compile(r"google\.colab|/content/|colab\.research\.google|Colab(?:oratory)?\b", re.I)
_MACOS = re.compile(r"\bmacOS\b|\bDarwin\b|/Users/\w+/(?:opt|miniforge|Library)|\bApple M\d\b|\bmps\b", re.I)
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
    ("keras", re.compile(r"site-packages[/\\]keras[/\\]|\bimport keras\b|\bKERAS_BACKEND\b|Using \w+ backend", re.I)),
)
_TORCH_BUILD = re.compile(r"\b(?:torch|pytorch)\S*\s*[=:v ]{0,4}\d+\.\d+(?:\.\d+)?\+cu(\d{2,3})\b|"
                          r"CUDA used to build PyTorch: ([\d.]+)|\b\d+\.\d+\.\d+\+cu(\d{2,3})\b", re.I)
_TORCH_CPU = re.compile(r"\b\d+\.\d+(?:\.\d+)?\+cpu\b|CUDA used to build PyTorch: None|\bpy\d\.?\d+_cpu_\d\b|"
                        r"\bcpuonly\b", re.I)
_TF_RUNTIME = re.compile(r"(?:libcudart\.so\.|cudart64_)(\d+)(?:\.(\d+))?")
_DEVICE = re.compile(r"\b(cuda:\d+|/?(?:device:)?GPU:\d+)\b", re.I)


def cuda_from_tag(tag: str) -> str:
    """``"121"`` -> ``"12.1"``, ``"92"`` -> ``"9.2"`` (PyTorch's ``+cuXXX`` tags)."""
    return f"{tag[:-1]}.{tag[-1]}"


@dataclass
class Setting:
    """What a log shows about where it ran.

    Attributes:
        os: ``"windows"``, ``"wsl"``, ``"colab"``, ``"macos"`` or None (Linux or unknown).
        frameworks: frameworks the log shows (``"pytorch"``, ``"tensorflow"``, ``"jax"``, ``"keras"``).
        torch_cuda: CUDA version PyTorch was built for (``"12.1"``), ``"cpu"`` for a CPU build, None if unknown.
        tf_cuda: CUDA runtime version TensorFlow tried or opened (``"11.0"``), None if unknown.
        devices: device names the log mentions (``cuda:1``, ``GPU:0``), in order.
    """

    os: str | None = None
    frameworks: set[str] = field(default_factory=set)
    torch_cuda: str | None = None
    tf_cuda: str | None = None
    devices: list[str] = field(default_factory=list)


def _os(text: str) -> str | None:
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
    return setting


def setting_notes(setting: Setting) -> list[str]:
    """One line each for what the setting shows (empty parts left out)."""
    notes = []
    names = {"windows": "native Windows", "wsl": "WSL2", "colab": "Google Colab", "macos": "macOS"}
    if setting.os:
        notes.append(f"Runs on {names[setting.os]} (from paths and names in the log).")
    builds = []
    if setting.torch_cuda:
        builds.append("PyTorch " + ("CPU build" if setting.torch_cuda == "cpu" else f"built for CUDA "
                                                                                   f"{setting.torch_cuda}"))
    if setting.tf_cuda:
        builds.append(f"TensorFlow looks for CUDA runtime {setting.tf_cuda}")
    if builds:
        notes.append("Builds in the log: " + "; ".join(builds) + ".")
    if setting.devices:
        notes.append("Devices the log names: " + ", ".join(setting.devices[:8]) + ".")
    return notes
