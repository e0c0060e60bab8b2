"""``allgpu doctor --log``: a message several causes share is ordered by what the same log shows (CUDA_VISIBLE_DEVICES
set, a container, the GPU's compute capability, the packages installed), not by a fixed list; Paddle's CUDAPlace
messages, both ONNX Runtime/Paddle flavours installed, R torch without a CUDA toolkit. Every log here was written by
us from the message formats (Paddle's pybind place binding, mlverse/torch's install_type()): fixtures, never a
figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


PADDLE_NO_GPU = "E0301 10:00:00.000000  1234 pybind.cc:1261] Cannot use GPU because there is no GPU detected on your machine."


def test_paddle_cpu_package_says_so() -> None:
    log = ("E0301 10:00:00.000000  1234 pybind.cc:1277] Cannot use GPU because you have installed CPU version "
           "PaddlePaddle.\nIf you want to use GPU, please try to install GPU version PaddlePaddle by: pip install "
           "paddlepaddle-gpu\nIf you only have CPU, please change CUDAPlace(0) to be CPUPlace().")
    assert causes(log)[:1] == ("cpu-build",)


def test_paddle_gpu_build_counting_no_gpu_is_the_driver_then_hidden_devices() -> None:
    assert causes(PADDLE_NO_GPU)[:2] == ("no-driver", "devices-hidden")


def test_zero_devices_with_cuda_visible_devices_set_is_hidden_devices() -> None:
    log = "$ CUDA_VISIBLE_DEVICES=3 python train.py\n" + PADDLE_NO_GPU
    assert causes(log)[:2] == ("devices-hidden", "no-driver")
    log = "$ CUDA_VISIBLE_DEVICES=2 python train.py\nRuntimeError: No CUDA GPUs are available"
    assert causes(log)[0] == "devices-hidden"


def test_zero_devices_in_a_container_is_the_driver_not_passed_in() -> None:
    # the same PyTorch message, no CUDA_VISIBLE_DEVICES, but run in a container: the container has no GPU
    bare = "RuntimeError: No CUDA GPUs are available"
    assert causes(bare)[0] == "devices-hidden"  # the message's own order when the log shows nothing else
    log = "root@3f2a9c1b7d4e:/workspace# python train.py\n" + bare
    assert causes(log)[:2] == ("no-driver", "devices-hidden")
    log = "$ docker run -it my-image python main.py\n" + PADDLE_NO_GPU
    assert causes(log)[0] == "no-driver"


TF_DEVICE = ("2020-10-03 17:02:22.488913: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1325] Created TensorFlow "
             "device (/job:localhost/replica:0/task:0/device:GPU:0 with 6000 MB memory) -> physical GPU (device: 0, "
             "name: {name}, pci bus id: 0000:01:00.0, compute capability: {cap})\n")
TF_INVALID = ("2020-10-03 17:02:24.528951: F tensorflow/core/kernels/cwise_op_gpu.h:99] Non-OK-status: "
              "GpuLaunchKernel(...) status: Internal: invalid device function\n")


def test_invalid_device_function_in_tensorflows_own_kernel_on_a_supported_gpu_is_a_cuda_mismatch() -> None:
    named = causes(TF_DEVICE.format(name="GeForce GTX 1080", cap="6.1") + TF_INVALID)
    assert named[:2] == ("cuda-version-mismatch", "unsupported-compute-capability")


def test_invalid_device_function_without_that_evidence_keeps_the_architecture_first() -> None:
    # an extension's kernel, no GPU registered by a framework: kernels built for another architecture
    assert causes("RuntimeError: CUDA error: invalid device function")[:2] == (
        "unsupported-compute-capability", "cuda-version-mismatch")
    # TensorFlow with an Ampere GPU and a TensorFlow 1.x build: the GPU is newer than the build
    log = "tensorflow 1.15.0\n" + TF_DEVICE.format(name="NVIDIA A100-SXM4-40GB", cap="8.0") + TF_INVALID
    assert causes(log)[0] == "unsupported-compute-capability"


@pytest.mark.parametrize("listing", [
    "onnx 1.6.0\nonnxruntime 1.2.0\nonnxruntime-gpu 1.2.0\nCUDA 10.1",
    "paddlepaddle==2.3.0\npaddlepaddle-gpu==2.3.0.post112",
])
def test_both_flavours_installed_is_the_cpu_package_shadowing(listing: str) -> None:
    assert causes(listing)[:1] == ("cpu-build",)


def test_gpu_flavour_alone_names_nothing() -> None:
    assert causes("onnx 1.6.0\nonnxruntime-gpu 1.2.0\nCUDA 10.1") == ()


def test_r_torch_without_a_cuda_toolkit_at_install() -> None:
    log = "> library(torch)\n> install_torch()\n> cuda_is_available()\n[1] FALSE"
    assert causes(log)[:3] == ("missing-cuda-libs", "cpu-build", "no-driver")
    assert causes("> library(torch)\n> cuda_is_available()\n[1] TRUE") == ()
