"""Rules on a :class:`~allgpu.doctor.frameworks.FrameworksReading` (TensorFlow, JAX, Keras) beside the
:class:`~allgpu.doctor.reading.EnvironmentReading` (NVML, PyTorch): why TensorFlow or JAX would leave a GPU idle.

Pure: every rule is tested on recorded readings (``tests/doctor_readings/frameworks``). Each finding is a
:class:`Problem` whose id is a documented cause id (:mod:`allgpu.doctor.causes`) and whose evidence names the
reading fields (``tensorflow.built_with_cuda=False``) and the child's log lines it rests on.
"""

from __future__ import annotations

import re
from typing import Callable

from allgpu.doctor.causes import CAUSES
from allgpu.doctor.frameworks import TF_DISTS, FrameworksReading, TensorFlowReading
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.problem import Problem
from allgpu.doctor.reading import EnvironmentReading

# The nvidia-* wheels `pip install tensorflow[and-cuda]` brings (TensorFlow >= 2.14 on Linux finds CUDA there).
TF_CUDA_WHEELS = ("nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12", "nvidia-cufft-cu12",
                  "nvidia-curand-cu12", "nvidia-cusolver-cu12", "nvidia-cusparse-cu12", "nvidia-nccl-cu12")
# Memory (MiB) another process holds past which TensorFlow's / JAX's up-front reservation fails.
HELD_MIB = 1024.0

Context = tuple[FrameworksReading, EnvironmentReading | None]


def _version(text: str | None) -> tuple[int, ...]:
    nums = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in nums[:2]) if nums else ()


def _problem(cause: str, text: str, evidence: list[str], severity: str | None = None, fix: str | None = None
             ) -> Problem:
    c = CAUSES[cause]
    return Problem(cause, severity or c.severity, text, fix or c.fix, evidence=tuple(evidence))


def _log_evidence(log: str, cause: str) -> list[str]:
    """Lines of the child's own log that point at ``cause``."""
    hits = [h for h in read_log(log).causes() if h.cause == cause]
    return [f"TensorFlow's log while importing, line {h.line}: {h.text[:140]}" for h in hits[:2]]


def _gpus_present(env: EnvironmentReading | None) -> int | None:
    return None if env is None else len(env.gpus)


def _tf_packages(fw: FrameworksReading) -> list[str]:
    return [p for p in TF_DISTS if p in fw.packages]


def rule_import_failed(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """A framework whose import crashed, hung or raised."""
    out = []
    for name, reading in (("TensorFlow", fw.tensorflow), ("JAX", fw.jax), ("Keras", fw.keras)):
        if reading is None or not reading.error or reading.error.startswith("not read"):
            continue
        evidence = [f"{name.lower()}.error={reading.error}"]
        log = getattr(reading, "log", "")
        for hit in read_log(log).causes()[:2]:
            evidence.append(f"its log, line {hit.line}: {hit.text[:140]}")
        out.append(_problem("framework-import-failed", f"Importing {name} failed: {reading.error}.", evidence))
    return out


def rule_tf_cpu_build(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """tensorflow-cpu, a build without CUDA, both packages installed, or native Windows with TF >= 2.11."""
    tf = fw.tensorflow
    pkgs = _tf_packages(fw)
    out = []
    if "tensorflow" in pkgs and "tensorflow-cpu" in pkgs:
        out.append(_problem(
            "cpu-build", "Both tensorflow and tensorflow-cpu are installed: they share the same files, so the one "
            "installed last decides whether TensorFlow has CUDA.",
            [f"packages: tensorflow=={fw.packages['tensorflow']}, tensorflow-cpu=={fw.packages['tensorflow-cpu']}"],
            severity="warning", fix="`pip uninstall -y tensorflow tensorflow-cpu` then `pip install "
            "tensorflow[and-cuda]` (GPU machine) or `pip install tensorflow-cpu` (CPU only)."))
    if tf is None or tf.error or tf.built_with_cuda is not False:
        return out
    present = _gpus_present(env)
    evidence = [f"tensorflow.version={tf.version}", "tensorflow.built_with_cuda=False"]
    evidence += [f"package tensorflow-cpu=={fw.packages['tensorflow-cpu']}"] if "tensorflow-cpu" in pkgs else []
    windows = fw.system == "Windows" and _version(tf.version) >= (2, 11)
    why = (" On native Windows TensorFlow >= 2.11 has no CUDA build at all." if windows else "")
    if present:
        evidence.append(f"NVML sees {present} GPU(s)")
        return out + [_problem("cpu-build", f"TensorFlow {tf.version} is built without CUDA, so none of the "
                               f"{present} GPU(s) can be used by it.{why}", evidence)]
    return out + [_problem("cpu-build", f"TensorFlow {tf.version} is built without CUDA; this machine shows no GPU "
                           f"either, so nothing is lost here.{why}", evidence, severity="info")]


def _tf_blind(fw: FrameworksReading, env: EnvironmentReading | None) -> TensorFlowReading | None:
    """The TF reading when it is a CUDA build that registered fewer GPUs than NVML shows (else None)."""
    tf = fw.tensorflow
    if tf is None or tf.error or not tf.built_with_cuda:
        return None
    present = _gpus_present(env)
    if present is not None and len(tf.gpus) >= present and present > 0:
        return None
    return tf if len(tf.gpus) == 0 or (present or 0) > len(tf.gpus) else None


def rule_tf_no_driver(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """A CUDA build of TensorFlow on a machine with no usable NVIDIA driver."""
    tf = _tf_blind(fw, env)
    if tf is None or env is None or env.gpus or not env.nvml_error:
        return []
    evidence = ["tensorflow.built_with_cuda=True", "tensorflow.gpus=[]", f"environment.nvml_error={env.nvml_error}"]
    evidence += _log_evidence(tf.log, "no-driver")
    return [_problem("no-driver", f"TensorFlow {tf.version} is a CUDA {tf.cuda_version or ''} build, but this "
                     "machine has no usable NVIDIA driver, so it registers no GPU.", evidence)]


def rule_tf_driver_too_old(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """The driver supports an older CUDA major version than TensorFlow's build (within a major version, CUDA's
    minor-version compatibility lets an older driver run the build: NVIDIA CUDA Compatibility guide)."""
    tf = _tf_blind(fw, env)
    if tf is None or env is None or not env.driver_cuda_version or not tf.cuda_version:
        return []
    if _version(env.driver_cuda_version)[:1] >= _version(tf.cuda_version)[:1]:
        return []
    return [_problem("cuda-version-mismatch", f"TensorFlow {tf.version} is built for CUDA {tf.cuda_version}, but "
                     f"driver {env.driver_version} supports CUDA {env.driver_cuda_version} at most.",
                     [f"tensorflow.cuda_version={tf.cuda_version}",
                      f"environment.driver_cuda_version={env.driver_cuda_version}"]
                     + _log_evidence(tf.log, "cuda-version-mismatch"))]


def _min_capability(caps: tuple[str, ...]) -> tuple[int, int] | None:
    values = []
    for c in caps:
        m = re.search(r"(\d)(\d+)$", c.replace(".", ""))
        if m:
            values.append((int(m.group(1)), int(m.group(2))))
    return min(values) if values else None


def rule_tf_capability(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """GPUs below the lowest compute capability the TensorFlow build has kernels for."""
    tf = _tf_blind(fw, env)
    floor = _min_capability(tf.compute_capabilities) if tf is not None else None
    if tf is None or env is None or floor is None:
        return []
    old = [g for g in env.gpus if g.compute_capability and _version(g.compute_capability) < floor]
    if not old:
        return []
    names = ", ".join(f"GPU {g.index} ({g.name}, {g.compute_capability})" for g in old)
    return [_problem("unsupported-compute-capability", f"{names} is below {floor[0]}.{floor[1]}, the lowest compute "
                     f"capability TensorFlow {tf.version} is built for, so TensorFlow ignores it.",
                     [f"tensorflow.compute_capabilities={','.join(tf.compute_capabilities)}"]
                     + [f"environment.gpus[{g.index}].compute_capability={g.compute_capability}" for g in old]
                     + _log_evidence(tf.log, "unsupported-compute-capability"))]


def rule_tf_missing_libs(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """A CUDA build with GPUs and a driver, but CUDA libraries it cannot load (the and-cuda wheels missing)."""
    tf = _tf_blind(fw, env)
    if tf is None or env is None or not env.gpus or env.nvml_error:
        return []
    if rule_tf_driver_too_old(fw, env) or rule_tf_capability(fw, env):
        return []
    log_ev = _log_evidence(tf.log, "missing-cuda-libs")
    missing = [w for w in TF_CUDA_WHEELS if w not in fw.packages]
    if fw.system != "Linux" or _version(tf.version) < (2, 14):
        missing = []
    if not log_ev and not missing:
        return []
    evidence = log_ev + ([f"packages missing: {', '.join(missing)}"] if missing else [])
    return [_problem("missing-cuda-libs", f"TensorFlow {tf.version} (CUDA {tf.cuda_version}) registers "
                     f"{len(tf.gpus)} of {len(env.gpus)} GPU(s): it cannot load the CUDA libraries it needs.",
                     evidence)]


def rule_tf_hidden(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """CUDA_VISIBLE_DEVICES leaves TensorFlow fewer GPUs than the machine has."""
    tf = fw.tensorflow
    cvd = fw.env.get("CUDA_VISIBLE_DEVICES")
    if tf is None or tf.error or not tf.built_with_cuda or env is None or cvd is None:
        return []
    if len(tf.gpus) >= len(env.gpus):
        return []
    return [_problem("devices-hidden", f"CUDA_VISIBLE_DEVICES={cvd!r} leaves TensorFlow {len(tf.gpus)} of the "
                     f"{len(env.gpus)} GPU(s) the driver sees.",
                     [f"env CUDA_VISIBLE_DEVICES={cvd!r}", f"tensorflow.gpus={list(tf.gpus)}",
                      f"NVML sees {len(env.gpus)} GPU(s)"])]


def rule_log_level(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """TF_CPP_MIN_LOG_LEVEL hides the lines that say why TensorFlow skips a GPU."""
    level = fw.env.get("TF_CPP_MIN_LOG_LEVEL")
    tf = fw.tensorflow
    if level not in ("1", "2", "3") or tf is None or tf.error or tf.gpus or not (env and env.gpus):
        return []
    return [_problem("messages-hidden", f"TF_CPP_MIN_LOG_LEVEL={level} hides TensorFlow's "
                     + ("informational lines and warnings" if level != "1" else "informational lines")
                     + ", where it says why it registers no GPU (the doctor read TensorFlow with level 0).",
                     [f"env TF_CPP_MIN_LOG_LEVEL={level}"])]


def rule_memory_held(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """Another process holds GPU memory while TensorFlow/JAX would reserve nearly all of it up front."""
    if env is None:
        return []
    busy = [(g, sum(p.used_mib or 0 for p in g.processes if p.pid != env.pid)) for g in env.gpus]
    busy = [(g, mib) for g, mib in busy if mib >= HELD_MIB]
    who = []
    tf = fw.tensorflow
    if tf is not None and tf.built_with_cuda and fw.env.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() != "true":
        who.append("TensorFlow (TF_FORCE_GPU_ALLOW_GROWTH is not true)")
    if fw.jax is not None and fw.jax.backend == "gpu" and fw.env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "") != "false":
        who.append("JAX (XLA_PYTHON_CLIENT_PREALLOCATE is not false)")
    if not busy or not who:
        return []
    gpus = ", ".join(f"GPU {g.index} ({mib:.0f} MiB held by other processes)" for g, mib in busy)
    return [Problem("memory-held", "error", f"{' and '.join(who)} reserves nearly all of a GPU's memory at start, "
                    f"while {gpus}: the reservation or cuBLAS/cuDNN handles fail.", CAUSES["memory-held"].fix,
                    tuple(g.index for g, _ in busy),
                    tuple(f"environment.gpus[{g.index}]: {mib:.0f} MiB held by other processes" for g, mib in busy))]


def rule_jax(fw: FrameworksReading, env: EnvironmentReading | None) -> list[Problem]:
    """A CPU-only JAX (no CUDA plugin) on a machine with GPUs, or a CUDA JAX that fell back to the CPU."""
    jx = fw.jax
    if jx is None or jx.error or jx.backend not in ("cpu", None):
        return []
    plugins = [p for p in fw.packages if p.startswith("jax-cuda")]
    present = _gpus_present(env)
    evidence = [f"jax.backend={jx.backend}", f"jax.devices={list(jx.devices)}",
                "packages: " + (", ".join(plugins) if plugins else "no jax-cuda*-plugin")]
    if not plugins and "+cuda" not in (jx.jaxlib_version or ""):
        severity = "error" if present else "info"
        more = (f" although NVML sees {present} GPU(s)" if present else "; this machine shows no GPU either")
        return [_problem("cpu-build", f"JAX {jx.version} has no CUDA plugin, so it runs on the CPU{more}.",
                         evidence, severity=severity)]
    for hit in read_log(jx.log).causes():
        return [_problem(hit.cause, f"JAX {jx.version} has a CUDA plugin but fell back to the CPU: {hit.text[:160]}",
                         evidence + [f"JAX's log, line {hit.line}: {hit.text[:140]}"])]
    return []


RULES: tuple[Callable[[FrameworksReading, EnvironmentReading | None], list[Problem]], ...] = (
    rule_import_failed, rule_tf_cpu_build, rule_tf_no_driver, rule_tf_driver_too_old, rule_tf_capability,
    rule_tf_missing_libs, rule_tf_hidden, rule_log_level, rule_memory_held, rule_jax,
)


def diagnose_frameworks(fw: FrameworksReading, env: EnvironmentReading | None = None) -> list[Problem]:
    """Every framework rule on the readings; pure."""
    return [p for rule in RULES for p in rule(fw, env)]
