"""``allgpu doctor --log`` reads a cause's words in every spelling the field uses: negations and stems of "not
built with CUDA" ("wasn't build", "was not built", "isn't compiled", "not compile", "never been compiled"), a
ggml-style feature line with ``BLAS = 0``, NVML's ``Unknown Error`` and ``Uninitialized`` (NVML is a part of the
driver). Every log here was written by us in those spellings, for tools that do not exist: fixtures, never a
figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_cues import read_cues
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("text", [
    "Zorblib wasn't build with CUDA support",
    "zorb.core: zorblib was not built with GPU support, kernels run on the host",
    "warning: this wheel isn't compiled with CUDA; reinstall the GPU wheel",
    "Zorb version not compile with GPU support.",
    "zorb has never been compiled for the GPU on this platform",
    "note: zorblib wasn't built for CUDA",
])
def test_negated_build_spellings_read_as_a_cpu_build(text: str) -> None:
    assert causes(text)[:1] == ("cpu-build",)


@pytest.mark.parametrize("text", [
    "zorblib was built with CUDA support (sm_80, sm_90)",
    "Compiled with GPU support: yes",
    "zorb: build with CUDA support enabled",
])
def test_affirmed_builds_name_no_cpu_build(text: str) -> None:
    assert "cpu-build" not in causes(text)


def test_a_feature_line_without_blas_reads_as_a_cpu_build() -> None:
    line = "system_info: n_threads = 8 / 16 | AVX = 1 | AVX2 = 1 | FMA = 1 | NEON = 0 | BLAS = 0 | SSE3 = 1 |"
    assert causes(line)[:1] == ("cpu-build",)
    assert causes(line.replace("BLAS = 0", "BLAS = 1")) == ()
    assert read_cues([line]).cause == "cpu-build"


def test_nvml_unknown_error_reads_as_the_driver() -> None:
    assert causes("zorbtool.gpus.NVMLError_Unknown: Unknown Error\nRunning on a generic GPU")[:1] == ("no-driver",)
    assert read_cues(["gpu stats: NVML returned an unknown status"]).cause == "no-driver"


def test_nvml_uninitialized_beside_no_gpu_puts_the_driver_first() -> None:
    no_gpu = "No GPU detected. Switching to CPU mode"
    assert causes("Error while loading pynvml. Original error: Uninitialized\n" + no_gpu)[:1] == ("no-driver",)
    # without the NVML failure the same line keeps its order (a CPU build first)
    assert causes(no_gpu)[:1] == ("cpu-build",)
