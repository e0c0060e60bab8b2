"""The frameworks' view beside PyTorch's in ``allgpu doctor``: one row per framework, GPUs each registers."""

from __future__ import annotations

from rich.table import Table

from allgpu.doctor.framework_rules import TF_CUDA_WHEELS
from allgpu.doctor.frameworks import FrameworksReading
from allgpu.doctor.reading import EnvironmentReading
from allgpu.doctor.rules import torch_gpus


def _tf_build(fw: FrameworksReading) -> str:
    tf = fw.tensorflow
    if tf is None:
        return ""
    pkgs = ", ".join(f"{p}=={fw.packages[p]}" for p in fw.packages if p.startswith(("tensorflow", "tf-")))
    if tf.built_with_cuda:
        build = f"CUDA {tf.cuda_version or '?'}, cuDNN {tf.cudnn_version or '?'}"
        if tf.compute_capabilities:
            build += f", {' '.join(tf.compute_capabilities)}"
        if fw.system == "Linux":
            have = sum(1 for w in TF_CUDA_WHEELS if w in fw.packages)
            build += f"; tensorflow[and-cuda] wheels {have}/{len(TF_CUDA_WHEELS)}"
    elif tf.built_with_cuda is False:
        build = "CPU build"
    else:
        build = "?"
    return f"{build} ({pkgs})" if pkgs else build


def _jax_gpus(devices: tuple[str, ...]) -> int:
    return sum(1 for d in devices if "cpu" not in d.lower())


def _backend_gpus(fw: FrameworksReading, env: EnvironmentReading, backend: str | None) -> str:
    """GPUs the Keras backend sees: TensorFlow's, PyTorch's or JAX's count, as read above."""
    if backend == "tensorflow" and fw.tensorflow is not None and not fw.tensorflow.error:
        return f"{len(fw.tensorflow.gpus)} (TensorFlow's)"
    if backend == "torch":
        return f"{torch_gpus(env)} (PyTorch's)"
    if backend == "jax" and fw.jax is not None and not fw.jax.error:
        return f"{_jax_gpus(fw.jax.devices)} (JAX's)"
    return "?"


def frameworks_table(fw: FrameworksReading, env: EnvironmentReading) -> Table:
    """Rows: NVML (the driver), PyTorch, then TensorFlow / Keras / JAX as the child process read them."""
    t = Table(title="What each framework sees", title_justify="left")
    for col in ("", "version", "build", "GPUs"):
        t.add_column(col)
    t.add_row("NVIDIA driver (NVML)", env.driver_version or "-", f"CUDA {env.driver_cuda_version}"
              if env.driver_cuda_version else (env.nvml_error or "-").split(":")[0], str(len(env.gpus)))
    t.add_row("PyTorch", env.torch_version, f"CUDA {env.torch_cuda}" if env.torch_cuda else "CPU build",
              str(torch_gpus(env)))
    tf = fw.tensorflow
    if tf is not None:
        gpus = "[red]failed[/red]" if tf.error else str(len(tf.gpus))
        t.add_row("TensorFlow", tf.version or "?", tf.error or _tf_build(fw), gpus)
    kr = fw.keras
    if kr is not None:
        chosen = fw.env.get("KERAS_BACKEND")
        backend = f"backend {kr.backend or '?'} " + (f"(KERAS_BACKEND={chosen})" if chosen else "(default)")
        t.add_row("Keras", kr.version or "?", kr.error or backend, _backend_gpus(fw, env, kr.backend))
    jx = fw.jax
    if jx is not None:
        plugins = ", ".join(p for p in fw.packages if p.startswith("jax-cuda")) or "no CUDA plugin"
        gpus = "[red]failed[/red]" if jx.error else str(_jax_gpus(jx.devices))
        t.add_row("JAX", jx.version or "?", jx.error or f"backend {jx.backend} ({plugins})", gpus)
    if fw.env:
        t.caption = "set: " + ", ".join(f"{k}={v}" for k, v in fw.env.items() if k != "LD_LIBRARY_PATH")
    return t
