"""Causes drawn from what a log shows beyond its known messages: the setting (:mod:`allgpu.doctor.log_setting`), the
throughput series (:mod:`allgpu.doctor.log_throughput`) and the lines a user prints to show that no GPU is
available, which name no cause alone: the candidates depend on the framework, its build and the operating system.

Each piece of evidence is ``(cause, weight, source, text, also)``: ``also`` are the other candidates, in order, that
the verdict names after ``cause`` when nothing else decides. Pure.
"""

from __future__ import annotations

import re

from typing import TYPE_CHECKING

from allgpu.doctor.log_setting import driver_cuda, tf_build_cuda
from allgpu.doctor.log_throughput import POOR_SCALING, scaling, stalls

if TYPE_CHECKING:
    from allgpu.doctor.log_reader import LogHit, LogReading

Evidence = tuple[str, float, str, str, tuple[str, ...]]
# Native Windows TensorFlow has no GPU from this version on (the last GPU build for Windows is 2.10).
TF_WINDOWS_LAST_GPU = (2, 10)


def _version(text: str | None) -> tuple[int, int] | None:
    parts = (text or "").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def _major(version: str | None) -> int | None:
    v = _version(version if version and "." in version else (version or "") + ".0")
    return v[0] if v else None


def _framework_of(hit: LogHit, log: LogReading) -> str | None:
    low = hit.text.lower()
    if "torch" in low or "cuda.is_available" in low:
        return "pytorch"
    if any(k in low for k in ("tf.", "tensorflow", "is_gpu_available", "physical_device", "num gpus", 'device_type: "',
                                      "device_type='")):  # TensorFlow's device list, not a tool's "device_type cpu"
        return "tensorflow"
    named = {"torch": "pytorch", "tensorflow": "tensorflow", "jax": "jax"}
    known = (log.setting.frameworks | {named[k] for k in log.facts.versions if k in named}) - {"keras"}
    return next(iter(known)) if len(known) == 1 else None


# A "no GPU" line that says the build itself has GPU support (Paddle's "Compiled with WITH_GPU, but no GPU found in
# runtime", "You are using GPU version Paddle"): not a CPU build.
# Theano's "CUDA is installed, but device gpu is not available" says the same of the CUDA install.
_GPU_BUILD = re.compile(r"Compiled with WITH_GPU|using (?:the )?GPU version|(?<!not )(?<!n't )\b(?:compiled|built) "
                        r"with "
                        r"(?:CUDA|GPU)\b(?! support: (?:no|false|off))|\b(?:CUDA|the CUDA toolkit|GPU support) "
                        r"(?:is|was) installed\b", re.I)


def _machine_candidates(log: LogReading) -> tuple[tuple[str, ...], str] | None:
    """Candidates the operating system or a CPU-only package decides, whatever the framework."""
    setting = log.setting
    if setting.os == "macos":
        return ("cpu-build",), "macOS has no CUDA: every framework build for macOS is CPU (or MPS) only"
    if setting.os == "wsl1":
        return ("no-driver",), "WSL1 gives Linux no GPU (CUDA needs WSL2 and the Windows NVIDIA driver)"
    if setting.os == "colab":
        return ("no-driver", "cpu-build"), "on Colab a runtime without a GPU shows no GPU to any framework"
    if setting.cpu_packages:
        return ("cpu-build", "no-driver"), f"the log names the CPU-only package {setting.cpu_packages[0]}"
    return None


def _unavailable_candidates(frameworks: set[str | None], log: LogReading) -> tuple[tuple[str, ...], str]:
    """Causes of "no GPU available", most likely first, and why that order."""
    setting = log.setting
    tf = _version(log.facts.versions.get("tensorflow"))
    machine = _machine_candidates(log)
    if machine:
        return machine
    if "rtorch" in setting.frameworks:
        # mlverse/torch's install_type(): CUDA, CUDA_HOME/CUDA_PATH's version.txt, /usr/local/cuda or nvcc, else "cpu".
        return ("missing-cuda-libs", "cpu-build", "no-driver"), (
            "R torch downloads its CUDA build only when it finds the CUDA toolkit at install time (CUDA_HOME or "
            "CUDA_PATH, /usr/local/cuda, nvcc); a conda environment's cudatoolkit is not looked at")
    if len(frameworks - {None}) >= 2:
        return ("no-driver", "cpu-build"), "two frameworks both see no GPU: the machine, not one build"
    if "tensorflow" in frameworks and tf and tf > TF_WINDOWS_LAST_GPU:
        if setting.os == "windows":
            return ("cpu-build",), f"TensorFlow {tf[0]}.{tf[1]} on native Windows has no GPU support (2.10 was last)"
        return ("cpu-build", "missing-cuda-libs", "no-driver"), (
            f"TensorFlow {tf[0]}.{tf[1]} printed no CUDA library failure: on native Windows it has no GPU support")
    if "tensorflow" in frameworks:
        return ("missing-cuda-libs", "no-driver", "cpu-build"), "TensorFlow usually names the library it missed"
    if "jax" in frameworks and not setting.torch_cuda:
        return ("cpu-build", "missing-cuda-libs", "no-driver"), (
            "JAX lists no GPU and gave no reason: a jaxlib without its CUDA plugin (pip install \"jax[cuda12]\")")
    if setting.torch_cuda == "cpu":
        return ("cpu-build",), "PyTorch is a CPU build"
    nvml = next((r for r in log.enums if r.api == "NVML" and r.cause == "no-driver"), None)
    if nvml:
        return ("no-driver", "cpu-build", "devices-hidden"), (
            f"line {nvml.line}: NVML, a part of the driver, failed ({nvml.name}), so the driver is the first suspect")
    gpu_build = next((h for h in log.hits if _GPU_BUILD.search(h.text)), None)
    if gpu_build:
        return ("no-driver", "cuda-version-mismatch", "devices-hidden"), (
            f"line {gpu_build.line} says the build has GPU support, so the driver is the first suspect")
    if setting.torch_cuda or setting.other_cuda:
        build = setting.torch_cuda or (setting.other_cuda or ("", ""))[0]
        return ("no-driver", "cuda-version-mismatch", "devices-hidden"), (
            f"the framework is built for CUDA {build}, so the driver is the first suspect")
    if setting.os == "wsl":
        return ("no-driver", "cpu-build"), "under WSL2 the GPU comes from the Windows driver through /usr/lib/wsl/lib"
    return ("cpu-build", "no-driver", "devices-hidden"), "the log shows no build or driver"


def _unavailable(log: LogReading) -> list[Evidence]:
    hits = [h for h in log.hits if h.pattern in ("gpu-unavailable-flag", "gpu-unavailable-text", "gpu-count-zero",
                                                  "no-gpu-said")]
    if not log.registered and not any(h.pattern == "tf-device-list-gpu" for h in log.hits):
        # a device list with no GPU in it (TensorFlow's, or JAX's [CpuDevice(id=0)])
        hits += [h for h in log.hits if h.pattern in ("tf-device-list-cpu", "jax-devices")][:1]
    if not hits or any(h.cause and h.weight >= 1.0 for h in log.hits):
        return []  # none, or a message in the same log already settles why no GPU is available
    frameworks = {_framework_of(h, log) for h in hits}
    order, why = _unavailable_candidates(frameworks, log)
    hit = hits[0]
    text = f"log line {hit.line}: {hit.text[:140]} ({why})"
    return [(order[0], 0.6, "gpu-unavailable", text, order[1:])]


def _windows_tf(log: LogReading) -> list[Evidence]:
    tf = _version(log.facts.versions.get("tensorflow"))
    if log.setting.os != "windows" or not tf or tf <= TF_WINDOWS_LAST_GPU or log.registered:
        return []
    return [("cpu-build", 0.6, "windows-tf", f"TensorFlow {tf[0]}.{tf[1]} on native Windows (paths in the log): "
             "TensorFlow >= 2.11 has no GPU on native Windows", ())]


def _newer(build: str, driver: str) -> bool:
    """A build's CUDA newer than the newest a driver supports: by major from CUDA 11 on (minor-version
    compatibility), by major and minor before it."""
    b, d = _version(build if "." in build else build + ".0"), _version(driver if "." in driver else driver + ".0")
    if not b or not d:
        return False
    return b[0] > d[0] if b[0] >= 11 else b > d


def _driver_cuda(log: LogReading) -> list[Evidence]:
    """The build's CUDA newer than the newest the driver supports (``nvidia-smi``'s ``CUDA Version``, or NVIDIA's
    table for the driver version the log prints)."""
    versions = log.facts.versions
    driver, source = versions.get("cuda"), "nvidia-smi shows a driver supporting CUDA {} at most"
    if not driver and driver_cuda(versions.get("driver")):
        driver = driver_cuda(versions.get("driver"))
        source = f"driver {versions.get('driver')} supports CUDA {{}} at most"
    build = _build_cuda(log)
    if not driver or not build or not _newer(build[0], driver):
        return []
    return [("cuda-version-mismatch", 0.9, "driver-cuda", f"{build[1]} but " + source.format(driver), ())]


def _build_cuda(log: LogReading) -> tuple[str, str] | None:
    """The CUDA the framework in the log was built for, and where that comes from."""
    setting = log.setting
    if setting.torch_cuda and setting.torch_cuda != "cpu":
        return setting.torch_cuda, f"PyTorch built for CUDA {setting.torch_cuda}"
    if setting.tf_cuda:
        return setting.tf_cuda, f"TensorFlow loads CUDA runtime {setting.tf_cuda}"
    tf = _version(log.facts.versions.get("tensorflow"))
    cuda = tf_build_cuda(tf)
    if cuda and tf:
        return cuda, f"TensorFlow {tf[0]}.{tf[1]} is built with CUDA {cuda}"
    if setting.other_cuda:
        return setting.other_cuda[0], f"{setting.other_cuda[1]} is built for CUDA {setting.other_cuda[0]}"
    return None


def _gpu_too_new(log: LogReading) -> list[Evidence]:
    """A GPU newer than every architecture the build has kernels for (an A100 with TensorFlow 1.x, an RTX 5090 with
    a PyTorch built for CUDA 12.1)."""
    arch, build = log.setting.gpu_arch, _build_cuda(log)
    if not arch or not build or (log.registered and not any(h.cause for h in log.hits)):
        return []  # a run whose GPUs registered and that shows no failure is not explained by its GPU
    have = _version(build[0] if "." in build[0] else build[0] + ".0")
    name, first, printed = arch
    too_old = have and (have < first if first >= (12, 8) else have[0] < first[0])
    if not too_old:
        return []
    return [("unsupported-compute-capability", 0.9, "gpu-too-new", f"{printed} ({name}) needs CUDA "
             f"{first[0]}.{first[1]} or later, but {build[1]}: the build has no kernels for it",
             ("cuda-version-mismatch",))]


def _wsl_no_device(log: LogReading) -> list[Evidence]:
    if log.setting.os != "wsl" or log.cvd is not None:
        return []
    hit = next((h for h in log.hits if h.pattern == "cuda-no-device"), None)
    if hit is None:
        return []
    return [("no-driver", 0.7, "wsl-no-device", f"log line {hit.line}: {hit.text[:120]} (under WSL2 the GPU comes "
             "from the Windows driver through /usr/lib/wsl/lib; a Linux driver installed inside WSL hides it)", ())]


# Messages that say the CUDA runtime counts no GPU. Which cause comes first follows the same log: the run setting
# CUDA_VISIBLE_DEVICES (devices hidden), a container (started without its GPUs: the driver is not passed in), else
# the message's own order (Paddle's GPU build counting none: the driver first).
_ZERO_DEVICES = ("paddle-no-gpu", "cuda-no-device", "torch-no-gpus")


def _zero_devices(log: LogReading) -> list[Evidence]:
    hit = next((h for h in log.hits if h.pattern in _ZERO_DEVICES), None)
    if hit is None or log.setting.os in ("wsl", "wsl1", "macos"):
        return []
    line = f"log line {hit.line}: {hit.text[:120]}"
    if log.cvd is not None:
        return [("devices-hidden", 0.7, "zero-devices-cvd", f"{line} (the run sets CUDA_VISIBLE_DEVICES="
                 f"{log.cvd!r}: the devices it names are the ones CUDA counts)", ("no-driver",))]
    if log.setting.container:
        return [("no-driver", 0.7, "zero-devices-container", f"{line} (inside a container: one started without "
                 "--gpus / the NVIDIA Container Toolkit has no driver or device files)", ("devices-hidden",))]
    if hit.pattern == "paddle-no-gpu":
        return [("no-driver", 0.7, "zero-devices", f"{line} (PaddlePaddle's GPU build counts no GPU: the driver "
                 "is missing or not passed in, e.g. a container without --gpus)", ("devices-hidden",))]
    return []


def _both_flavours(log: LogReading) -> list[Evidence]:
    """The CPU and GPU packages of one framework both installed: the same module, and the CPU one can answer."""
    if not log.setting.both_flavours or log.registered:
        return []
    name = log.setting.both_flavours[0]
    return [("cpu-build", 0.6, "both-flavours", f"both {name} and {name}-gpu are installed: they install the same "
             f"module and the CPU package can shadow the GPU one (pip uninstall {name} {name}-gpu, then install "
             f"{name}-gpu alone)", ("missing-cuda-libs",))]


def _own_kernels_invalid(log: LogReading) -> list[Evidence]:
    """'invalid device function' from TensorFlow's own kernels on a GPU it registered, whose compute capability is
    at or above its minimum and not newer than its build: its pip builds carry kernels (or PTX) for that GPU, so
    the CUDA runtime it loaded is not the one it was built with."""
    hit = next((h for h in log.hits if h.pattern == "invalid-device-function"), None)
    cap = log.setting.capability
    if (hit is None or "tensorflow" not in log.frameworks or not log.registered or cap is None or cap < (3, 5)
            or _gpu_too_new(log) or any(h.pattern == "tf-ignoring-gpu" for h in log.hits)):
        return []
    return [("cuda-version-mismatch", 0.85, "own-kernels-invalid", f"log line {hit.line}: {hit.text[:120]} "
             f"(TensorFlow registered the GPU, compute capability {cap[0]}.{cap[1]}, and its own kernel failed: "
             "its build covers this GPU, the CUDA runtime or libraries it loaded do not match it)",
             ("unsupported-compute-capability",))]


def _throughput(log: LogReading) -> list[Evidence]:
    out: list[Evidence] = []
    stall = stalls(log.throughput)
    if stall:
        out.append(("input-bound", 0.6, "step-stalls", stall, ("communication-bound",)))
    scaled = scaling(log.throughput)
    if scaled and scaled[0] < POOR_SCALING:
        link = log.throughput.slow_link
        if link:
            out.append(("communication-bound", 0.8, "scaling", f"{scaled[1]}; log line {link[0]}: {link[1]}",
                        ("input-bound",)))
        else:
            out.append(("input-bound", 0.6, "scaling", scaled[1], ("communication-bound",)))
    return out


def _stuck_in_nccl(log: LogReading) -> list[Evidence]:
    """A log that ends in NCCL's setup lines ("NCCL INFO ... Init COMPLETE", channel and ring lines): the run hung in
    its first collective, which prints no error until a watchdog fires (if one is set)."""
    last = next((t for t in reversed(log.tail) if "NCCL INFO" in t[1]), None)
    progressed = log.throughput.steps or log.throughput.by_gpus or log.facts.rates
    if last is None or progressed or any(h.cause and h.weight >= 0.8 for h in log.hits):
        return []
    return [("nccl-error", 0.6, "nccl-stuck", f"log line {last[0]}: {last[1][:140]} (the log stops in NCCL's "
             "setup: the first collective never completed)", ("multi-gpu-ok",))]


def setting_evidence(log: LogReading) -> list[Evidence]:
    """Every cause the log's setting, throughput and "no GPU available" lines point at."""
    return (_unavailable(log) + _windows_tf(log) + _driver_cuda(log) + _gpu_too_new(log) + _wsl_no_device(log)
            + _zero_devices(log) + _both_flavours(log) + _own_kernels_invalid(log) + _throughput(log)
            + _stuck_in_nccl(log))
