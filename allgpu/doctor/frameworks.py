"""TensorFlow, JAX and Keras as installed here, read in a child process with a timeout.

Importing TensorFlow takes seconds and can crash the interpreter (a missing CUDA library, an illegal instruction),
so the frameworks are imported by ``python -c`` in a child, never in the doctor itself; the child prints one JSON
line per framework as soon as it has read it, so a crash or hang in one keeps the readings before it, and the
crash or timeout is itself recorded. The child runs with ``TF_CPP_MIN_LOG_LEVEL=0`` so its own log (kept in the
reading, last lines) shows why a GPU was skipped; the user's value is recorded separately.

A :class:`FrameworksReading` is plain frozen data that round-trips through JSON like
:class:`~allgpu.doctor.reading.EnvironmentReading`; :mod:`allgpu.doctor.framework_rules` judges it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Mapping

from allgpu.doctor.reading import _build, _jsonable

# Environment variables that change what the frameworks do with GPUs.
ENV_VARS = ("CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
            "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
            "KERAS_BACKEND", "JAX_PLATFORMS", "LD_LIBRARY_PATH")
TF_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
            "tf-nightly", "tf-nightly-cpu", "intel-tensorflow")
JAX_DISTS = ("jax", "jaxlib")
KERAS_DISTS = ("keras", "tf-keras")
LOG_LINES = 80
_MARK = "ALLGPU-READING "


@dataclass(frozen=True)
class TensorFlowReading:
    """TensorFlow as the child saw it.

    Attributes:
        version: ``tf.__version__``; None when the import failed.
        built_with_cuda: ``tf.test.is_built_with_cuda()``.
        cuda_version / cudnn_version: ``tf.sysconfig.get_build_info()``'s, the versions the build needs.
        compute_capabilities: the build's ``cuda_compute_capabilities`` (``"sm_60"``, ``"compute_90"``).
        gpus: ``tf.config.list_physical_devices("GPU")`` names.
        error: the import or query failure, a crash (``"crashed (exit code -11)"``) or ``"timed out after 120 s"``.
        log: the last lines TensorFlow logged while importing (``TF_CPP_MIN_LOG_LEVEL=0``).
    """

    version: str | None = None
    built_with_cuda: bool | None = None
    cuda_version: str | None = None
    cudnn_version: str | None = None
    compute_capabilities: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    error: str | None = None
    log: str = ""


@dataclass(frozen=True)
class JaxReading:
    """JAX as the child saw it: versions, ``jax.default_backend()``, ``jax.devices()`` as text, failure."""

    version: str | None = None
    jaxlib_version: str | None = None
    backend: str | None = None
    devices: tuple[str, ...] = ()
    error: str | None = None
    log: str = ""


@dataclass(frozen=True)
class KerasReading:
    """Keras: version and ``keras.backend.backend()`` (chosen by ``KERAS_BACKEND``, default tensorflow)."""

    version: str | None = None
    backend: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FrameworksReading:
    """The frameworks installed beside PyTorch.

    Attributes:
        system: ``platform.system()`` (TensorFlow >= 2.11 has no GPU build for native ``"Windows"``).
        packages: installed distributions that matter, name to version: TensorFlow variants, jax/jaxlib and
            their CUDA plugins, keras, and the ``nvidia-*`` CUDA library wheels.
        env: the variables of ``ENV_VARS`` that are set.
        tensorflow / jax / keras: the child's readings; None when not installed (or not read).
    """

    system: str
    packages: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    tensorflow: TensorFlowReading | None = None
    jax: JaxReading | None = None
    keras: KerasReading | None = None

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FrameworksReading":
        """Rebuild a reading saved with :meth:`to_dict`.

        Raises:
            ReadingFormatError: a field is missing, unknown or of the wrong type.
        """
        return _build(cls, data, "frameworks")


_PROBE = r'''
import json, sys
def emit(name, data):
    print("ALLGPU-READING " + json.dumps({"framework": name, **data}), flush=True)
def begin(name):
    print("ALLGPU-BEGIN " + name, flush=True)
for name in sys.argv[1:]:
    begin(name)
    out = {}
    try:
        if name == "tensorflow":
            import tensorflow as tf
            out["version"] = tf.__version__
            out["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
            info = dict(tf.sysconfig.get_build_info())
            out["cuda_version"] = info.get("cuda_version")
            out["cudnn_version"] = info.get("cudnn_version")
            out["compute_capabilities"] = [str(c) for c in (info.get("cuda_compute_capabilities") or [])]
            out["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
        elif name == "jax":
            import jax, jaxlib
            out["version"] = jax.__version__
            out["jaxlib_version"] = getattr(jaxlib, "__version__", None)
            out["backend"] = jax.default_backend()
            out["devices"] = [str(d) for d in jax.devices()]
        elif name == "keras":
            import keras
            out["version"] = keras.__version__
            out["backend"] = keras.backend.backend()
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    emit(name, out)
'''


def installed_packages() -> dict[str, str]:
    """Distributions that matter to the frameworks' GPU use, name (lower case) to version. Reads metadata only."""
    out = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        cuda_wheel = name.startswith("nvidia-") and name != "nvidia-ml-py"
        if name in TF_DISTS + JAX_DISTS + KERAS_DISTS or cuda_wheel or name.startswith(("jax-cuda", "jax-rocm")):
            out[name] = dist.version
    return dict(sorted(out.items()))


def _frameworks_to_read(packages: Mapping[str, str]) -> list[str]:
    names = []
    if any(p in packages for p in TF_DISTS):
        names.append("tensorflow")
    if "keras" in packages:
        names.append("keras")
    if "jax" in packages:
        names.append("jax")
    return names


def _parse(stdout: str) -> tuple[dict[str, dict], str | None]:
    """Readings printed by the child, and the framework it had begun but not finished (crash or hang)."""
    readings: dict[str, dict] = {}
    begun = None
    for line in stdout.splitlines():
        if line.startswith("ALLGPU-BEGIN "):
            begun = line.split(" ", 1)[1].strip()
        elif line.startswith(_MARK):
            data = json.loads(line[len(_MARK):])
            readings[data.pop("framework")] = data
            begun = None
    return readings, begun


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-LOG_LINES:])


def read_frameworks(timeout: float = 120.0, python: str | None = None) -> FrameworksReading:
    """Read the installed frameworks (TensorFlow, Keras, JAX) in one child process.

    Args:
        timeout: seconds the child may take in all; a framework still importing then is recorded as timed out.
        python: interpreter to run the child with (default: this one).

    Returns:
        A :class:`FrameworksReading`; frameworks not installed are None. Never raises for a broken install.
    """
    packages = installed_packages()
    env_now = {k: os.environ[k] for k in ENV_VARS if k in os.environ}
    names = _frameworks_to_read(packages)
    stdout = stderr = ""
    failure = None
    if names:
        child_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", PYTHONUNBUFFERED="1")
        try:
            done = subprocess.run([python or sys.executable, "-c", _PROBE, *names], capture_output=True, text=True,
                                  timeout=timeout, env=child_env)
            stdout, stderr = done.stdout, done.stderr
            if done.returncode != 0:
                failure = f"crashed (exit code {done.returncode})"
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            failure = f"timed out after {timeout:g} s"
    readings, begun = _parse(stdout)
    log = _tail(stderr)
    for name in names:
        if name not in readings:
            if begun is not None and name != begun:
                readings[name] = {"error": f"not read: the child stopped while importing {begun}"}
            else:
                readings[name] = {"error": f"importing {name} {failure or 'gave no reading'}"}
    tf = readings.get("tensorflow")
    jx = readings.get("jax")
    kr = readings.get("keras")
    return FrameworksReading(
        system=platform.system(),
        packages=packages,
        env=env_now,
        tensorflow=None if tf is None else _build(TensorFlowReading, {**tf, "log": log}, "tensorflow"),
        jax=None if jx is None else _build(JaxReading, {**jx, "log": log}, "jax"),
        keras=None if kr is None else _build(KerasReading, kr, "keras"),
    )
