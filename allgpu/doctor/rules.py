"""Doctor rules: pure functions from an :class:`EnvironmentReading` to :class:`Problem` s.

Nothing here reads the machine; every rule is tested against recorded readings (``tests/doctor_readings``).
Each rule answers one way a GPU ends up idle or slow; :func:`diagnose` runs them all.
"""

from __future__ import annotations

from typing import Callable

from allgpu.doctor.problem import Problem, by_severity
from allgpu.doctor.reading import EnvironmentReading
from allgpu.devices.visible import VisibleDevices, VisibleMapping, explain, map_to_driver, parse_visible_devices
from allgpu.doctor.workers import usable_cores

WHEEL_HINT = "https://pytorch.org/get-started/locally/"
# Fraction of a GPU's memory that, taken by other processes, leaves too little to train.
FULL_FRACTION = 0.9
# Memory in use with no process listed above this (MiB, or this fraction of the GPU) means a hidden user.
UNLISTED_MIB, UNLISTED_FRACTION = 1024.0, 0.1
# Other processes holding at least this much memory (MiB), or this GPU utilisation (%), are another job.
BUSY_MIB, BUSY_PERCENT = 1024.0, 20


def visibility(reading: EnvironmentReading) -> tuple[VisibleDevices, VisibleMapping]:
    """``CUDA_VISIBLE_DEVICES`` parsed and mapped onto the driver's GPUs (from torch's UUIDs when known)."""
    visible = parse_visible_devices(reading.cuda_visible_devices)
    uuids = [d.uuid for d in reading.torch_devices] if reading.torch_cuda_available else []
    return visible, map_to_driver(visible, reading.gpus, uuids)


def torch_gpus(reading: EnvironmentReading) -> int:
    """GPUs PyTorch can use: ``torch.cuda.device_count()`` when CUDA is available, else 0."""
    return reading.torch_device_count if reading.torch_cuda_available else 0


def _version(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _gpu_list(indices: tuple[int, ...] | list[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(map(str, indices))


def rule_no_gpu(r: EnvironmentReading) -> list[Problem]:
    """No GPU anywhere: say plainly why (CPU build, no driver library, no kernel driver, NVML error)."""
    if r.gpus or torch_gpus(r):
        return []
    reasons = []
    if r.torch_cuda is None:
        reasons.append(f"torch is a CPU build ({r.torch_version})")
    elif r.torch_cuda_error:
        reasons.append(f"torch (CUDA {r.torch_cuda}) could not start CUDA: {r.torch_cuda_error}")
    severity = "warning"
    if r.nvml_error and r.nvml_library_error is not None:
        lib = f"NVML could not load libnvidia-ml.so.1 ({r.nvml_library_error})"
        if r.kernel_driver is None:
            reasons.append(f"{lib}: no NVIDIA driver on this machine")
        else:
            severity = "error"
            reasons.append(f"{lib}, although the NVIDIA kernel driver is loaded ({r.kernel_driver}): the driver's "
                           "user-space libraries are missing, as in a container started without GPU support")
    elif r.nvml_error:
        severity = "error"
        reasons.append(f"the NVIDIA driver could not be queried ({r.nvml_error})")
    else:
        reasons.append(f"the NVIDIA driver {r.driver_version} is installed but sees no GPU")
    if severity == "warning":
        fix = ("Nothing to fix to train on the CPU: MirroredStrategy(num_replicas=2) runs CPU replicas on Gloo. "
               "To train on GPUs, use a machine with NVIDIA GPUs and driver and a CUDA build of torch "
               f"({WHEEL_HINT}).")
    elif r.nvml_library_error is not None:
        fix = ("In a container, start it with the NVIDIA Container Toolkit (`docker run --gpus all …`); on the host, "
               "reinstall the driver package that provides libnvidia-ml.so.1 and check `nvidia-smi`.")
    else:
        fix = ("Run `nvidia-smi`: after a driver upgrade a reboot is usually needed (driver/library version "
               "mismatch); otherwise reinstall the driver.")
    return [Problem("no-gpu", severity, "No GPU is visible: " + " and ".join(reasons) + ".", fix)]


def rule_nvml_unavailable(r: EnvironmentReading) -> list[Problem]:
    """torch uses GPUs but NVML failed: doctor and the monitor lose memory, process and link readings."""
    if not r.nvml_error or not torch_gpus(r):
        return []
    return [Problem("nvml-unavailable", "warning",
                    f"PyTorch sees {_plural(torch_gpus(r), 'GPU')} but NVML failed ({r.nvml_error}), so per-GPU "
                    "memory, processes, links and utilisation cannot be read.",
                    "Make libnvidia-ml.so.1 from the same driver available (in a container: NVIDIA Container "
                    "Toolkit with the `utility` capability, NVIDIA_DRIVER_CAPABILITIES=compute,utility).")]


def rule_cpu_build(r: EnvironmentReading) -> list[Problem]:
    """GPUs on the machine but torch was built without CUDA."""
    if r.torch_cuda is not None or not r.gpus:
        return []
    limit = f"no newer than CUDA {r.driver_cuda_version}, which the driver supports" if r.driver_cuda_version else \
        "matching the driver"
    return [Problem("torch-cpu-build", "error",
                    f"torch {r.torch_version} is a CPU build, so none of the {_plural(len(r.gpus), 'GPU')} the "
                    "driver sees can be used.",
                    f"Install a CUDA build of torch {limit}: `pip install torch --index-url "
                    f"https://download.pytorch.org/whl/cuXYZ` with cuXYZ from {WHEEL_HINT}.",
                    tuple(g.index for g in r.gpus))]


def rule_driver_too_old(r: EnvironmentReading) -> list[Problem]:
    """torch's CUDA is newer than the driver supports (NVIDIA CUDA Compatibility guide: a new major version
    needs a new driver; within a major version, minor-version compatibility runs most but not all code)."""
    build, driver = _version(r.torch_cuda), _version(r.driver_cuda_version)
    if build is None or driver is None or build <= driver:
        return []
    fix = (f"Upgrade the NVIDIA driver to one supporting CUDA {r.torch_cuda} (`nvidia-smi` shows 'CUDA Version: "
           f"{r.torch_cuda}' or newer), or install a torch built for CUDA {r.driver_cuda_version} or older "
           f"({WHEEL_HINT}).")
    if build[0] > driver[0]:
        return [Problem("driver-too-old", "error",
                        f"torch {r.torch_version} is built for CUDA {r.torch_cuda} but driver {r.driver_version} "
                        f"supports CUDA {r.driver_cuda_version} at most: CUDA cannot start on any GPU."
                        + (f" torch says: {r.torch_cuda_error}" if r.torch_cuda_error else ""),
                        fix, tuple(g.index for g in r.gpus))]
    return [Problem("driver-older-than-build", "warning",
                    f"torch is built for CUDA {r.torch_cuda}, driver {r.driver_version} supports CUDA "
                    f"{r.driver_cuda_version}: minor-version compatibility runs most code, but kernels that need "
                    "PTX JIT compilation or newer driver features fail at run time.",
                    fix, tuple(g.index for g in r.gpus))]


def rule_cuda_init_failed(r: EnvironmentReading) -> list[Problem]:
    """A CUDA build, GPUs the variable leaves visible, yet torch gets none, for a reason no other rule names."""
    if r.torch_cuda is None or not r.gpus or torch_gpus(r) or rule_driver_too_old(r):
        return []
    visible, mapping = visibility(r)
    if not mapping.torch_to_driver or visible.malformed:
        return []
    return [Problem("torch-cuda-init-failed", "error",
                    f"The driver sees {_plural(len(r.gpus), 'GPU')} but torch.cuda.is_available() is False: "
                    f"{r.torch_cuda_error or 'CUDA initialisation failed without a message'}.",
                    "Run `nvidia-smi` and `python -c \"import torch; torch.cuda.init()\"` to see the full error; "
                    "check /dev/nvidia* permissions and that no other driver stack (e.g. a conda cudatoolkit with "
                    "its own libcuda) shadows the system one.", tuple(g.index for g in r.gpus))]


def rule_visible_devices(r: EnvironmentReading) -> list[Problem]:
    """``CUDA_VISIBLE_DEVICES`` that is malformed, hides every GPU, or hides some."""
    visible, mapping = visibility(r)
    if visible.form == "unset":
        return []
    text = explain(visible, mapping if r.gpus else None)
    every = ",".join(str(g.index) for g in r.gpus) or "0,1"
    if visible.malformed or mapping.unresolved is not None:
        return [Problem("cuda-visible-devices-malformed", "error" if r.gpus else "warning",
                        text + " This is almost certainly not what was meant.",
                        f"Set a comma-separated list, each GPU once, of indices or UUIDs from `nvidia-smi -L`, e.g. "
                        f"`export CUDA_VISIBLE_DEVICES={every}`, or `unset CUDA_VISIBLE_DEVICES` to use every GPU.",
                        mapping.hidden)]
    if not r.gpus:
        return []
    if not mapping.torch_to_driver:
        return [Problem("cuda-visible-devices-hides-all", "error",
                        f"{text} PyTorch cannot use "
                        + (f"any of the {len(r.gpus)} GPUs" if len(r.gpus) > 1 else "the one GPU")
                        + " the driver sees.",
                        f"`unset CUDA_VISIBLE_DEVICES` (or `export CUDA_VISIBLE_DEVICES={every}`) before starting "
                        "Python; setting it inside the script after torch touched CUDA has no effect.",
                        mapping.hidden)]
    if mapping.hidden:
        return [Problem("cuda-visible-devices-hides", "warning",
                        f"{text} Only {len(set(mapping.torch_to_driver))} of {len(r.gpus)} GPUs can train.",
                        f"To train on all of them, `unset CUDA_VISIBLE_DEVICES` or `export CUDA_VISIBLE_DEVICES="
                        f"{every}`, then MirroredStrategy() starts one replica per GPU. If a scheduler (Slurm, "
                        "Kubernetes) set it for your allocation, the hiding is intended.", mapping.hidden)]
    return []


def rule_device_order(r: EnvironmentReading) -> list[Problem]:
    """Indices in the variable count in ``CUDA_DEVICE_ORDER``, not in nvidia-smi's PCI order."""
    visible = parse_visible_devices(r.cuda_visible_devices)
    if visible.form != "index" or r.cuda_device_order == "PCI_BUS_ID" or len({g.name for g in r.gpus}) < 2:
        return []
    return [Problem("cuda-device-order", "warning",
                    f"This machine mixes GPU models ({', '.join(sorted({g.name for g in r.gpus}))}) and "
                    f"CUDA_VISIBLE_DEVICES={visible.raw} uses indices, which CUDA counts fastest GPU first "
                    "(CUDA_DEVICE_ORDER=FASTEST_FIRST) while nvidia-smi counts in PCI bus order: index 0 may not "
                    "be the GPU nvidia-smi calls 0.",
                    "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`, or list GPU UUIDs from `nvidia-smi -L` instead.")]


def rule_busy(r: EnvironmentReading) -> list[Problem]:
    """Visible GPUs whose memory other processes hold (or that are nearly full)."""
    _, mapping = visibility(r)
    problems = []
    for g in r.gpus:
        if g.index not in mapping.torch_to_driver:
            continue
        others = [p for p in g.processes if p.pid != r.pid]
        used, total = g.memory_used_mib or 0.0, g.memory_total_mib or 0.0
        held = sum(p.used_mib or 0.0 for p in others)
        own = sum(p.used_mib or 0.0 for p in g.processes if p.pid == r.pid)
        full = total > 0 and used - own >= FULL_FRACTION * total
        unlisted = not g.processes and used > max(UNLISTED_MIB, UNLISTED_FRACTION * total)
        # A desktop (Xorg, a compositor) holds a few hundred MiB and little compute: not another job.
        working = others and (held >= BUSY_MIB or (g.utilization_percent or 0) >= BUSY_PERCENT)
        if not (working or full or unlisted):
            continue
        who = ", ".join(f"{p.name or '?'} (pid {p.pid}, " + (f"{p.used_mib:.0f} MiB)" if p.used_mib is not None
                                                             else "memory not reported)") for p in others)
        if not who:
            who = f"processes the driver cannot name here (another container?) hold {used:.0f} MiB"
        util = f", {g.utilization_percent}% busy" if g.utilization_percent is not None else ""
        cause = (f"GPU {g.index} ({g.name}) is in use by another job{util}: {who}; "
                 f"{used:.0f} of {total:.0f} MiB used.")
        if full:
            cause += " Too little memory is left to train: a replica there runs out of memory."
        fix = ("Wait for it, stop it (`nvidia-smi` shows the process), or leave this GPU out with "
               "CUDA_VISIBLE_DEVICES; sharing a GPU slows both jobs.")
        problems.append(Problem("gpu-busy", "error" if full else "warning", cause, fix, (g.index,)))
    return problems


def rule_one_gpu(r: EnvironmentReading) -> list[Problem]:
    """The machine itself has a single GPU: one replica, no speed-up from data parallelism."""
    if len(r.gpus) != 1 or torch_gpus(r) != 1:
        return []
    g = r.gpus[0]
    return [Problem("only-one-gpu", "info",
                    f"The driver sees one GPU ({g.name}) and PyTorch uses it: MirroredStrategy() runs one replica.",
                    "Nothing to fix. For more throughput, use a machine with more GPUs, or "
                    "MultiWorkerMirroredStrategy across machines.", (g.index,))]


def rule_nccl(r: EnvironmentReading) -> list[Problem]:
    """A CUDA build without NCCL: multi-GPU gradient all-reduce has no GPU backend."""
    if r.torch_cuda is None or r.nccl_available:
        return []
    n = torch_gpus(r)
    cause = f"torch {r.torch_version} has no NCCL (torch.distributed.is_nccl_available() is False)"
    fix = ("Use the official Linux CUDA wheels of torch, which bundle NCCL (pip install torch from "
           f"{WHEEL_HINT}); Windows builds have none, use WSL2 there.")
    if n >= 2:
        return [Problem("nccl-missing", "error",
                        cause + f", so the {n} visible GPUs cannot all-reduce gradients on the GPU.", fix)]
    return [Problem("nccl-missing", "info", cause + "; with one GPU nothing needs it yet.", fix)]


def rule_mig(r: EnvironmentReading) -> list[Problem]:
    """MIG mode: CUDA lets a process use one MIG instance, and NCCL cannot join instances."""
    problems = []
    on = [g for g in r.gpus if g.mig_enabled]
    if on:
        names = "; ".join(f"GPU {g.index} ({_plural(len(g.mig_devices), 'instance')})" for g in on)
        problems.append(Problem(
            "mig-enabled", "warning",
            f"MIG is on for {names}: a process can use one MIG instance, and NCCL cannot all-reduce between "
            "instances, so MirroredStrategy cannot spread one job over them.",
            "For multi-GPU training, turn MIG off: `sudo nvidia-smi -i " + ",".join(str(g.index) for g in on)
            + " -mig 0` then reset the GPU; or run one single-device job per instance with "
            "CUDA_VISIBLE_DEVICES=MIG-<uuid> from `nvidia-smi -L`.", tuple(g.index for g in on)))
    pending = [g for g in r.gpus if g.mig_pending is not None and g.mig_pending != g.mig_enabled]
    if pending:
        problems.append(Problem(
            "mig-change-pending", "info",
            f"A MIG mode change is pending on {_gpu_list([g.index for g in pending])}: it applies after a GPU reset.",
            "Reset the GPU (`sudo nvidia-smi -i N -r`) or reboot to apply it.", tuple(g.index for g in pending)))
    return problems


def _supported(capability: str, arch_list: tuple[str, ...]) -> bool:
    """Whether torch ships code for a compute capability: a cubin for the same major version and an equal or
    lower minor (CUDA binary compatibility), or PTX for an equal or lower version (JIT-compiled)."""
    cap = _version(capability)
    if cap is None:
        return True
    for arch in arch_list:
        kind, _, num = arch.partition("_")
        digits = "".join(c for c in num if c.isdigit())
        if len(digits) < 2 or num != digits:  # sm_90a style: architecture-specific, not forward compatible
            continue
        have = (int(digits[:-1]), int(digits[-1]))
        if kind == "sm" and have[0] == cap[0] and have[1] <= cap[1]:
            return True
        if kind == "compute" and have <= cap:
            return True
    return False


def rule_arch(r: EnvironmentReading) -> list[Problem]:
    """A visible GPU whose compute capability this torch build has no kernels for."""
    if r.torch_cuda is None or not r.torch_arch_list:
        return []
    _, mapping = visibility(r)
    bad = [g for g in r.gpus if g.index in mapping.torch_to_driver and g.compute_capability
           and not _supported(g.compute_capability, r.torch_arch_list)]
    if not bad:
        return []
    desc = ", ".join(f"GPU {g.index} {g.name} (sm_{g.compute_capability.replace('.', '')})" for g in bad)
    return [Problem("gpu-arch-unsupported", "error",
                    f"torch {r.torch_version} has no kernels for {desc}; it was built for "
                    f"{' '.join(r.torch_arch_list)}. Work there fails with 'no kernel image is available'.",
                    f"Install a torch build whose CUDA supports this GPU (newer GPUs need newer CUDA; {WHEEL_HINT}).",
                    tuple(g.index for g in bad))]


def rule_peer_access(r: EnvironmentReading) -> list[Problem]:
    """Visible GPU pairs without peer access: all-reduce then goes through host memory."""
    _, mapping = visibility(r)
    pairs = {(p.a, p.b) for p in r.torch_peer_access if not p.ok and p.a < p.b}
    lookup = mapping.torch_to_driver
    driver_pairs = {(lookup[a], lookup[b]) for a, b in pairs if a < len(lookup) and b < len(lookup)}
    driver_pairs |= {(k.a, k.b) for k in r.links if k.p2p_read is False
                     and k.a in lookup and k.b in lookup}
    if torch_gpus(r) < 2 or len(set(lookup)) < 2 or not driver_pairs:
        return []
    shown = ", ".join(f"{a}-{b}" for a, b in sorted(driver_pairs))
    disabled = r.nccl_env.get("NCCL_P2P_DISABLE") not in (None, "0")
    return [Problem("no-peer-access", "warning",
                    f"GPU pairs {shown} have no peer-to-peer access, so NCCL moves gradients through host "
                    "memory: all-reduce is slower." + (" NCCL_P2P_DISABLE is set too." if disabled else ""),
                    "Check `nvidia-smi topo -m`; on VMs and some consumer GPUs P2P is off by design. Gradient "
                    "accumulation (fit(accumulation_steps=k)) all-reduces k times less often.",
                    tuple(sorted({i for pair in driver_pairs for i in pair})))]


def rule_cores(r: EnvironmentReading) -> list[Problem]:
    """Fewer than two usable cores per GPU replica: the input pipeline starves the GPUs."""
    n = torch_gpus(r)
    cores = usable_cores(r.cpu_affinity, r.cpu_quota)
    if n == 0 or cores >= 2 * n:
        return []
    return [Problem("few-cpu-cores", "warning",
                    f"{_plural(cores, 'usable core')} for {_plural(n, 'GPU replica')}: each replica's training "
                    "loop and data loading share less than two cores, so GPUs wait for input.",
                    "Ask the scheduler for more CPUs (e.g. Slurm --cpus-per-task), preprocess data offline, or "
                    "move augmentation to the GPU.")]


RULES: tuple[Callable[[EnvironmentReading], list[Problem]], ...] = (
    rule_no_gpu, rule_nvml_unavailable, rule_cpu_build, rule_driver_too_old, rule_cuda_init_failed,
    rule_visible_devices, rule_device_order, rule_arch, rule_mig, rule_nccl, rule_busy, rule_peer_access,
    rule_cores, rule_one_gpu,
)


def diagnose(reading: EnvironmentReading) -> list[Problem]:
    """Run every rule on a reading; problems come errors first. Pure: reads nothing from the machine."""
    return by_severity(p for rule in RULES for p in rule(reading))
