"""The documented cause ids of a doctor verdict (``allgpu doctor --log`` / ``--run`` / framework readings).

Each finding of a verdict carries one of these ids; tools and the ``--log`` benchmark key on them, so an id is
never renamed or reused.

==================================  ======================================================================
``no-driver``                       no usable NVIDIA driver: none installed, ``libcuda``/NVML missing, a
                                    container started without GPUs, the kernel module not loaded
``cpu-build``                       the framework build has no CUDA: ``torch …+cpu``, ``tensorflow-cpu``,
                                    a CPU-only ``jaxlib``, native Windows TensorFlow >= 2.11
``missing-cuda-libs``               a CUDA build that cannot load CUDA runtime libraries (``libcudart``,
                                    ``libcudnn``, ``libcublas`` …): the pip ``nvidia-*`` packages or the
                                    toolkit are missing or not on the loader path
``cuda-version-mismatch``           driver older than the build's CUDA, or cuDNN / CUDA libraries older
                                    than the ones the framework was built against
``unsupported-compute-capability``  the GPU's architecture is below the build's minimum or has no kernels
``devices-hidden``                  ``CUDA_VISIBLE_DEVICES`` (empty, ``-1``, a subset) or
                                    ``tf.config.set_visible_devices`` leaves GPUs out
``invalid-device-index``            the script asks for a GPU index the machine (or CUDA_VISIBLE_DEVICES)
                                    does not have: ``cuda:1`` or ``--gpu_ids 1`` on a one-GPU machine
``single-device-strategy``          several GPUs registered but the job runs on one: no strategy, the
                                    default strategy, ``OneDeviceStrategy``, a pinned ``tf.device``
``memory-held``                     another process, or the framework's up-front reservation, holds the
                                    memory a GPU needs (cuBLAS/cuDNN handles fail, allocation fails at start)
``out-of-memory``                   the job itself needs more GPU memory than there is
``input-bound``                     GPUs wait for input: too few loader workers, no prefetch, low utilisation
``communication-bound``             several GPUs wait on the gradient exchange: throughput grows far less
                                    than the GPU count, NCCL on sockets or with peer-to-peer disabled
``nccl-error``                      NCCL failed or hung between GPUs (collectives, P2P, shared memory)
``port-in-use``                     the rendezvous port (MASTER_PORT, --master_port, init_method) is taken
                                    by another job or a process left over from an earlier run
``process-group-missing``           a distributed call (SyncBatchNorm, all_reduce, a barrier) in a process
                                    that never joined a process group (started without a launcher)
``dataloader-shm``                  DataLoader workers ran out of shared memory (/dev/shm; a container's
                                    64 MB default)
``framework-import-failed``         importing the framework crashed or timed out
``messages-hidden``                 ``TF_CPP_MIN_LOG_LEVEL`` hides the messages that would say why
``multi-gpu-ok``                    every GPU present is registered and used: nothing to fix
==================================  ======================================================================

A log in which no known message appears gets no finding at all: the verdict says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    """One documented cause: its id, a short title, the default severity and the usual fix."""

    id: str
    title: str
    severity: str
    fix: str


_CAUSES = (
    Cause("no-driver", "no usable NVIDIA driver", "error",
          "Install the NVIDIA driver and check `nvidia-smi`; in a container start it with GPUs "
          "(`docker run --gpus all`, NVIDIA Container Toolkit); after a driver upgrade, reboot; after a suspend, reload "
          "the driver's modules (`sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`) or reboot."),
    Cause("cpu-build", "the framework is a CPU-only build", "error",
          "Install a CUDA build: `pip install tensorflow[and-cuda]` (Linux/WSL2; uninstall tensorflow-cpu first), "
          "`pip install -U \"jax[cuda12]\"`, or torch from https://pytorch.org/get-started/locally/. TensorFlow "
          ">= 2.11 has no GPU on native Windows: use WSL2."),
    Cause("missing-cuda-libs", "CUDA runtime libraries could not be loaded", "error",
          "Install the CUDA libraries the build expects: `pip install tensorflow[and-cuda]` / `jax[cuda12]` bring "
          "them as nvidia-* wheels; with a system toolkit, the version the build names must be on "
          "LD_LIBRARY_PATH. The log's failed library names say which is missing."),
    Cause("cuda-version-mismatch", "driver or CUDA libraries older than the build", "error",
          "Upgrade the NVIDIA driver to one supporting the build's CUDA (`nvidia-smi` shows the highest), or "
          "install cuDNN/CUDA libraries at least as new as the build was compiled with, or install a framework "
          "build for the CUDA you have."),
    Cause("unsupported-compute-capability", "the GPU is too old (or too new) for this build", "error",
          "Install a build compiled for this GPU's compute capability (check the framework's supported list), "
          "build from source with that capability, or use a newer GPU."),
    Cause("devices-hidden", "CUDA_VISIBLE_DEVICES or set_visible_devices hides GPUs", "error",
          "Unset CUDA_VISIBLE_DEVICES (or list every GPU) before Python starts, and remove "
          "tf.config.set_visible_devices / os.environ['CUDA_VISIBLE_DEVICES'] narrowing from the script."),
    Cause("invalid-device-index", "the script asks for a GPU that is not there", "error",
          "Use an index below torch.cuda.device_count() (`cuda:0` on one GPU), or the LOCAL_RANK a launcher "
          "sets; check the script's --gpu/--device/gpu_ids options and any cuda:N hard-coded in it."),
    Cause("single-device-strategy", "several GPUs, but the job runs on one", "warning",
          "Create tf.distribute.MirroredStrategy() with no devices= argument (or allgpu.MirroredStrategy()) and "
          "build the model inside strategy.scope(); drop OneDeviceStrategy and pinned tf.device('/GPU:0')."),
    Cause("memory-held", "GPU memory is held by another process or reserved up front", "error",
          "Stop the other process (`nvidia-smi` lists it), or let the framework grow memory on demand: "
          "TF_FORCE_GPU_ALLOW_GROWTH=true / tf.config.experimental.set_memory_growth, "
          "XLA_PYTHON_CLIENT_PREALLOCATE=false for JAX."),
    Cause("out-of-memory", "the job needs more GPU memory than there is", "error",
          "Lower the per-GPU batch size, use mixed precision, or spread the batch over more GPUs "
          "(MirroredStrategy divides the global batch)."),
    Cause("input-bound", "GPUs wait for input", "warning",
          "Feed the GPUs faster: DataLoader(num_workers>0, pin_memory=True), tf.data with "
          "map(num_parallel_calls=tf.data.AUTOTUNE) and .prefetch(tf.data.AUTOTUNE), or preprocess offline."),
    Cause("communication-bound", "the GPUs wait on the gradient exchange", "warning",
          "Check the links NCCL uses (`NCCL_DEBUG=INFO`: P2P/NVLink or IB rather than NET/Socket; `nvidia-smi topo "
          "-m`), do not disable P2P/IB without need, raise the per-GPU batch or accumulate gradients (DDP no_sync), "
          "and overlap the all-reduce with backward (bucketed DDP, MirroredStrategy's NCCL all-reduce)."),
    Cause("nccl-error", "NCCL failed between GPUs", "error",
          "Rerun with NCCL_DEBUG=INFO to see the failing transport; common fixes: a larger /dev/shm "
          "(`docker run --shm-size`), NCCL_P2P_DISABLE=1 where peer-to-peer is broken, matching NCCL versions."),
    Cause("port-in-use", "the rendezvous port is already in use", "error",
          "Pick a free port (MASTER_PORT=29501, torchrun --master_port, accelerate launch --main_process_port, "
          "init_method='tcp://host:PORT'), or stop the earlier run still holding it (`ss -ltnp | grep PORT`)."),
    Cause("process-group-missing", "a distributed call outside a process group", "error",
          "Start the script with a launcher (torchrun --nproc_per_node=N, accelerate launch), or on one process "
          "use single-process layers (BatchNorm instead of SyncBatchNorm) or init_process_group with world_size=1."),
    Cause("dataloader-shm", "DataLoader workers ran out of shared memory", "error",
          "Give the container more shared memory (`docker run --shm-size=8g` or `--ipc=host`), or lower "
          "num_workers; on Kubernetes mount an emptyDir with medium: Memory at /dev/shm."),
    Cause("framework-import-failed", "the framework could not be imported", "error",
          "Run `python -c \"import tensorflow\"` (or jax, keras) to see the full error; reinstall the package "
          "in a clean virtual environment."),
    Cause("messages-hidden", "TF_CPP_MIN_LOG_LEVEL hides the explanation", "info",
          "Unset TF_CPP_MIN_LOG_LEVEL (or set it to 0) and run again: TensorFlow then logs why it skips a GPU."),
    Cause("multi-gpu-ok", "every GPU is registered and used", "info", "Nothing to fix."),
)

CAUSES: dict[str, Cause] = {c.id: c for c in _CAUSES}
CAUSE_IDS: tuple[str, ...] = tuple(CAUSES)
