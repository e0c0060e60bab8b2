"""TensorFlow imported on demand, kept off the GPUs and within this replica's share of the cores.

TensorFlow only runs the input pipeline here; the model runs in PyTorch. Left alone, TensorFlow would size its
thread pools for every core on each of the N replicas of a machine (N times oversubscribed), and a GPU build of
TensorFlow would reserve nearly all memory of every visible GPU the first time it runs an op. So, once per process:

- before TensorFlow has started its runtime, GPUs are hidden from it (``tf.config.set_visible_devices([], "GPU")``)
  and its intra-/inter-op pools get this replica's cores (``tf.config.threading``);
- for every dataset read, ``tf.data.Options().threading.private_threadpool_size`` is set to the same share unless
  the pipeline sets it itself (it applies even after TensorFlow has started).

When TensorFlow has already started (an op ran before the strategy was made), the process-wide settings cannot be
changed any more; a GPU TensorFlow then warns once, naming the fix.
"""

from __future__ import annotations

import warnings

from allgpu.devices.advice import cpu_affinity, cpu_quota, usable_cores
from allgpu.errors import UnsupportedError

_INSTALL = "pip install 'allgpu[tf]'"
_limited: dict[str, int] = {}


def import_tensorflow():
    """The ``tensorflow`` module. Raises UnsupportedError saying how to install it when it is missing."""
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise UnsupportedError(f"reading tf.data input needs TensorFlow, which is not installed ({exc}). Fix: "
                               f"{_INSTALL} (the CPU build is enough: it only runs the input pipeline).") from exc
    return tf


def cores_per_replica(local_replicas: int) -> int:
    """This machine's usable cores (affinity, cgroup quota) divided among its replicas; at least 1."""
    return max(1, usable_cores(cpu_affinity(), cpu_quota()) // max(1, local_replicas))


def limit_tensorflow(local_replicas: int) -> int:
    """Hide GPUs from TensorFlow and size its thread pools for one replica's cores, once per process.

    Args:
        local_replicas: replicas on this machine (they share its cores).

    Returns:
        The threads each tf.data pipeline of this replica may use.
    """
    if "threads" in _limited:
        return _limited["threads"]
    tf = import_tensorflow()
    threads = cores_per_replica(local_replicas)
    try:
        tf.config.set_visible_devices([], "GPU")
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # TensorFlow's runtime already started: process-wide settings are fixed now
        if tf.config.get_visible_devices("GPU"):
            warnings.warn(
                "TensorFlow started before allgpu could hide the GPUs from it, so it may hold most of their memory "
                "while PyTorch trains. Fix: create the allgpu strategy before building the tf.data pipeline, or call "
                "tf.config.set_visible_devices([], 'GPU') right after `import tensorflow`.", UserWarning, stacklevel=3)
    _limited["threads"] = threads
    return threads


def with_thread_limit(dataset, threads: int):
    """``dataset`` with a private tf.data thread pool of ``threads`` unless its options already choose one."""
    tf = import_tensorflow()
    if dataset.options().threading.private_threadpool_size:
        return dataset
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return dataset.with_options(options)
