"""``allgpu doctor --log`` reading the settings around a message (:mod:`allgpu.doctor.log_blocks`): collect_env
reports, package lists, ONNX Runtime's providers; with nvidia-smi tables, device lists and CUDA_VISIBLE_DEVICES
read beside them. Every log here was written by us in the formats those tools print: fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_blocks import read_blocks
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import BLOCK_NOTE, verdict_from_log

pytestmark = pytest.mark.unit


def verdict(text: str):
    return verdict_from_log(read_log(text))


def collect_env(version: str, build: str, available: str, driver: str, gpus: str, os: str = "Ubuntu 22.04.3 LTS "
                "(x86_64)") -> str:
    return "\n".join([
        "Collecting environment information...", f"PyTorch version: {version}", "Is debug build: False",
        f"CUDA used to build PyTorch: {build}", "ROCM used to build PyTorch: N/A", "", f"OS: {os}",
        "Python version: 3.10.12 (main) [GCC 11.4.0] (64-bit runtime)", f"Is CUDA available: {available}",
        "CUDA runtime version: 12.1.105", f"GPU models and configuration: {gpus}", f"Nvidia driver version: {driver}",
        "cuDNN version: Could not collect", "", "Versions of relevant libraries:", "[pip3] numpy==1.26.4",
        f"[pip3] torch=={version}", "[conda] Could not collect"])


@pytest.mark.parametrize("text, cause", [
    # collect_env: a CPU wheel, a build with no CUDA (old and new spellings), no driver collected, a driver too old
    (collect_env("2.1.0+cpu", "None", "False", "Could not collect", "Could not collect"), "cpu-build"),
    (collect_env("1.7.1", "Could not collect", "No", "Could not collect", "Could not collect"), "cpu-build"),
    (collect_env("2.1.0+cu121", "12.1", "False", "Could not collect", "Could not collect"), "no-driver"),
    (collect_env("2.1.0+cu121", "12.1", "False", "470.82.01", "GPU 0: Tesla T4"), "cuda-version-mismatch"),
    # package lists: pip list, pip freeze, conda list, pip show, pip's install line
    ("Package      Version\n------------ -------\nnumpy        1.26.4\ntorch        2.2.1+cpu\n", "cpu-build"),
    ("numpy==1.26.4\ntorch==2.2.1+cpu\ntorchvision==0.17.1+cpu\n", "cpu-build"),
    ("# Name    Version    Build    Channel\npytorch   1.8.0   py3.8_cpu_0   pytorch\n", "cpu-build"),
    ("pytorch   2.0.0   cpu_generic_py310h3c6f2b5_0   conda-forge\n", "cpu-build"),
    ("cpuonly   2.0   0   pytorch\npytorch   2.0.1   py3.10_cpu_0   pytorch\n", "cpu-build"),
    ("$ pip show torch\nName: torch\nVersion: 2.0.1+cpu\nSummary: Tensors and Dynamic neural networks\n", "cpu-build"),
    # TensorFlow's packages: CPU-only `tensorflow` up to 2.0, both flavours, tensorflow-intel (native Windows)
    ("Package    Version\nKeras      2.2.4\ntensorflow 1.14.0\n", "cpu-build"),
    ("tensorflow       1.13.1\ntensorflow-gpu   1.13.1\n", "cpu-build"),
    ("Successfully installed tensorboard-1.12.2 tensorflow-1.12.0 termcolor-1.1.0\n", "cpu-build"),
    ("tensorflow   1.14.0   mkl_py37h45c423b_0\n", "cpu-build"),
    ("tensorflow          2.15.0\ntensorflow-intel    2.15.0\n", "cpu-build"),
    # ONNX Runtime: providers without CUDA, arenas for the CPU only
    (">>> ort.get_available_providers()\n['AzureExecutionProvider', 'CPUExecutionProvider']\n", "cpu-build"),
    ("2024-01-01 10:00:00.1 [I:onnxruntime:Default, bfc_arena.cc:306 AllocateRawInternal] Extending BFCArena for Cpu. "
     "bin_num:3\n", "cpu-build"),
    # CPU builds whose CUDA builds are other packages
    ("paddleocr==2.9.1\npaddlepaddle==2.6.2\n", "cpu-build"),
    ("Package        Version\nonnxruntime    1.18.0\nnumpy          1.26.4\n", "cpu-build"),
    ("mxnet    1.9.1\n", "cpu-build"),
    # JAX without a CUDA plugin
    ("jax                 0.4.26\njaxlib              0.4.26\n", "cpu-build"),
])
def test_a_block_alone_names_the_setting_it_states(text, cause):
    v = verdict(text)
    assert v.cause_ids[:1] == (cause,), v.to_dict()


def test_block_findings_say_they_are_read_from_the_environment():
    v = verdict("Package    Version\nKeras      2.2.4\ntensorflow 1.14.0\n")
    assert BLOCK_NOTE in v.findings[0].cause
    assert any("tensorflow 1.14.0" in e and "CPU-only" in e for e in v.findings[0].evidence)


@pytest.mark.parametrize("text", [
    collect_env("2.1.0+cu121", "12.1", "True", "535.104.05", "GPU 0: NVIDIA A100-SXM4-80GB"),
    "Package    Version\ntensorflow 2.15.0\nnumpy      1.26.4\n",  # Linux TensorFlow >= 2.1 carries its GPU support
    "tensorflow-gpu 1.14.0\nKeras 2.2.4\n",
    "pytorch   1.8.0   py3.8_cuda11.1_cudnn8.0.5_0   pytorch\n",
    "tensorflow   1.14.0   gpu_py37h4491b45_0\n",
    ">>> ort.get_available_providers()\n['CUDAExecutionProvider', 'CPUExecutionProvider']\n",
    "jax                 0.4.26\njaxlib              0.4.26\njax-cuda12-plugin   0.4.26\n",
    "tensorflow 1.15.0\n",  # the one 1.x pip `tensorflow` with GPU support
    "paddlepaddle-gpu 2.6.2\npaddleocr 2.9.1\n",
    "mxnet-cu112 1.9.1\n",
])
def test_a_block_that_shows_a_gpu_build_invents_no_cause(text):
    v = verdict(text)
    assert v.nothing_known and not v.findings, v.to_dict()


def test_a_log_with_no_known_message_still_says_what_it_read():
    text = collect_env("2.1.0+cu121", "12.1", "True", "535.104.05", "GPU 0: NVIDIA A100-SXM4-80GB")
    notes = " ".join(verdict(text).notes)
    assert "collect_env report" in notes and "Is CUDA available: True" in notes and "535.104.05" in notes
    notes = " ".join(verdict("torch==2.1.0+cu121\nnumpy==1.26.4\n").notes)
    assert "Packages the log lists: torch 2.1.0+cu121" in notes


def test_a_known_message_wins_over_a_block():
    text = ("UserWarning: CUDA initialization: Found no NVIDIA driver on your system.\n"
            "torch==2.2.1+cpu\n")
    assert verdict(text).cause_ids[0] == "no-driver"


def test_a_registered_gpu_silences_the_blocks():
    text = ("2019-01-01 10:00:00.000: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1511] Adding visible gpu "
            "devices: 0\ntensorflow 1.14.0\n")
    assert "cpu-build" not in verdict(text).cause_ids


def test_package_lines_are_read_only_for_gpu_relevant_names():
    blocks = read_blocks(["Epoch 1", "loss 0.52", "numpy 1.26.4", "torch 2.2.1+cu121", "[pip3] jaxlib==0.4.26"])
    assert sorted(blocks.packages) == ["jaxlib", "torch"]
    assert blocks.packages["torch"].line == 4


@pytest.mark.parametrize("text, cause", [
    # nvidia-smi: memory held at 0% utilisation with no process listed
    ("+-----------------------------------------------------------------------------+\n"
     "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |\n"
     "|   0  NVIDIA A100-SXM4-80GB  On   | 00000000:07:00.0 Off |                    0 |\n"
     "| N/A   34C    P0    62W / 400W |  40210MiB / 81920MiB |      0%      Default |\n"
     "| Processes:                                                                  |\n"
     "|  No running processes found                                                 |\n", "memory-held"),
    # CUDA_VISIBLE_DEVICES set to nothing before a framework counts no GPU
    ("$ CUDA_VISIBLE_DEVICES= python train.py\nRuntimeError: No CUDA GPUs are available\n", "devices-hidden"),
    # TensorFlow's empty GPU list on native Windows with TensorFlow 2.15
    ("C:\\Users\\me> python -c \"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\"\n[]\n"
     "C:\\Users\\me> pip list\ntensorflow 2.15.0\n", "cpu-build"),
    # the same asked in a REPL: the version and the empty list on the lines after the calls
    ("C:\\Users\\me> python\n>>> import tensorflow as tf\n>>> tf.__version__\n'2.15.0'\n"
     ">>> tf.config.list_physical_devices('GPU')\n[]\n", "cpu-build"),
    # CUDA's unknown error (999) and MATLAB's missing driver library, in wordings no exact reader had
    ("dev@box:~$ ./solver\nCUDA Failed with error code 999\n", "no-driver"),
    ("[ERROR]: cudaErrorUnknown: unknown error\n", "no-driver"),
    ("Error using gpuArray\nThe CUDA driver could not be loaded. The library name used was 'nvcuda.dll'.\n",
     "no-driver"),
    # cuDNN rejecting a descriptor: settled in threads as a cuDNN too old for the code
    ("Error using vl_nnconv\ncuDNN error at nnconv_cudnn.cu:120 (CUDNN_STATUS_BAD_PARAM)\n", "cuda-version-mismatch"),
])
def test_settings_read_beside_the_blocks(text, cause):
    assert verdict(text).cause_ids[:1] == (cause,), verdict(text).to_dict()


def test_a_repl_that_lists_a_gpu_is_not_read_as_none():
    text = (">>> tf.config.list_physical_devices('GPU')\n"
            "[PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')]\n")
    assert not any(h.pattern == "gpu-unavailable-flag" for h in read_log(text).hits)
