"""``allgpu doctor --log``: message formats of TensorFlow 1.x-2.21, JAX and PyTorch, device facts, the verdict,
the CLI, logs we wrote from bug reports' message formats (``tests/doctor_written_logs``: fixtures, never a figure),
and the ground-truth tooling of ``benchmarks/doctor_log_eval.py`` (real pastes, whose texts live outside the repo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from allgpu.cli.main import main
from allgpu.doctor.causes import CAUSE_IDS
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

ROOT = Path(__file__).resolve().parents[1]


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("line, cause", [
    # TensorFlow 1.x prefix, 2.x stream_executor prefix, absl prefix of 2.16+, xla prefix, no prefix.
    ("2018-10-30 18:48:01.233235: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1182] Ignoring visible gpu "
     "device (device: 0, name: GeForce GTX 1070, pci bus id: 0000:01:00.0, compute capability: 6.1) with Cuda "
     "compute capability 6.1. The minimum required Cuda capability is 7.0.", "unsupported-compute-capability"),
    ("2021-01-20 09:12:41.554318: W tensorflow/stream_executor/platform/default/dso_loader.cc:60] Could not load "
     "dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file", "missing-cuda-libs"),
    ("W0000 00:00:1777747452.331862    4188 gpu_device.cc:2365] Cannot dlopen some GPU libraries.",
     "missing-cuda-libs"),
    ("E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:447] Loaded runtime CuDNN library: 8.7.0 but source "
     "was compiled with: 8.9.4.", "cuda-version-mismatch"),
    ("2024-05-04 23:51:07.117420: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] Could not find cuda drivers "
     "on your machine, GPU will not be used.", "no-driver"),
    ("CUDA backend failed to initialize: Found CUDA version 12010, but JAX was built against version 12020, which "
     "is newer.", "cuda-version-mismatch"),
    ("WARNING:2025-06-15 17:04:55,449:jax._src.xla_bridge:791: An NVIDIA GPU may be present on this machine, but a "
     "CUDA-enabled jaxlib is not installed. Falling back to cpu.", "cpu-build"),
    ("AssertionError: Torch not compiled with CUDA enabled", "cpu-build"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "cuda-version-mismatch"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "unsupported-compute-capability"),
    ("2017-09-23 14:37:55.906121: E tensorflow/stream_executor/cuda/cuda_blas.cc:366] failed to create cublas "
     "handle: CUBLAS_STATUS_NOT_INITIALIZED", "memory-held"),
    ("ResourceExhaustedError: OOM when allocating tensor with shape[16,12,512,512] and type float on "
     "/job:localhost/replica:0/task:0/device:GPU:2 by allocator GPU_2_bfc", "out-of-memory"),
    ("node08:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
     "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:290, unhandled system error", "nccl-error"),
    ("UserWarning: The dataloader, train dataloader, does not have many workers which may be a bottleneck.",
     "input-bound"),
])
def test_one_message_names_its_cause(line, cause):
    assert causes(line)[:1] == (cause,)


def test_optional_libraries_and_informational_lines_name_no_cause():
    log = ("2023-05-01 12:17:26.572682: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: "
           "Could not find TensorRT\n"
           "2020-01-28 21:41:28.2: W tensorflow/stream_executor/platform/default/dso_loader.cc:55] Could not load "
           "dynamic library 'libnvinfer.so.6'; dlerror: libnvinfer.so.6: cannot open shared object file\n"
           "2018-05-10 09:14:16.5: W tensorflow/core/common_runtime/bfc_allocator.cc:217] Allocator (GPU_0_bfc) ran "
           "out of memory trying to allocate 84.60MiB. The caller indicates that this is not a failure, but may mean "
           "that there could be performance gains if more memory is available.\n")
    verdict = verdict_from_log(read_log(log))
    assert verdict.findings == () and verdict.nothing_known
    assert any("names no cause" in n for n in verdict.notes)


def test_a_log_with_nothing_known_says_so_and_names_no_cause():
    verdict = verdict_from_log(read_log("Epoch 1/10\n100/100 - 3s - loss: 0.31\nTraceback: KeyError: 'x'\n"))
    assert verdict.cause_ids == () and verdict.nothing_known
    assert verdict.present is None and verdict.registered is None


def test_libcuda_missing_is_the_driver_not_the_toolkit():
    log = ("2020-11-11 10:46:37.4: W tensorflow/stream_executor/platform/default/dso_loader.cc:60] Could not load "
           "dynamic library 'libcuda.so.1'; dlerror: libcuda.so.1: cannot open shared object file: No such file\n")
    assert causes(log) == ("no-driver",)


def test_without_a_driver_the_cuda_libraries_tensorflow_tried_at_import_are_not_the_cause():
    cudart = ("2021-05-01 10:00:00.1: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
              "dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open shared object file\n"
              "2021-05-01 10:00:00.2: I tensorflow/stream_executor/cuda/cudart_stub.cc:29] Ignore above cudart "
              "dlerror if you do not have a GPU set up on your machine.\n")
    libcuda = ("2021-05-01 10:00:01.1: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
               "dynamic library 'libcuda.so.1'; dlerror: libcuda.so.1: cannot open shared object file\n"
               "\x1b[33m2021-05-01 10:00:01.2: W tensorflow/stream_executor/cuda/cuda_driver.cc:269] failed call to "
               "cuInit: UNKNOWN ERROR (303)\x1b[0m\n")
    assert causes(cudart) == ("missing-cuda-libs",)
    assert causes(cudart + libcuda) == ("no-driver",)
    dlopen = ("2021-05-01 10:00:02.0: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1850] Cannot dlopen some GPU "
              "libraries.\n")
    assert set(causes(cudart + libcuda + dlopen)) == {"no-driver", "missing-cuda-libs"}


def test_no_device_with_a_missing_kernel_driver_is_no_driver_and_with_an_empty_cvd_is_hidden():
    no_device = "E tensorflow/stream_executor/cuda/cuda_driver.cc:466] failed call to cuInit: CUDA_ERROR_NO_DEVICE\n"
    driver = ("I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:86] kernel driver does not appear to be running "
              "on this host (h): /proc/driver/nvidia/version does not exist\n")
    assert causes(no_device + driver) == ("no-driver",)
    assert causes("$ export CUDA_VISIBLE_DEVICES=-1\n" + no_device) == ("devices-hidden",)


def test_torch_oom_figures_tell_the_jobs_own_memory_from_memory_others_hold():
    own = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
           "15.69 GiB of which 3.71 GiB is free. Including non-PyTorch memory, this process has 11.14 GiB memory in "
           "use. Of the allocated memory 10.14 GiB is allocated by PyTorch")
    others = ("RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 10.76 GiB total capacity; "
              "996.23 MiB already allocated; 8.81 MiB free; 1010.00 MiB reserved in total by PyTorch)")
    assert causes(own) == ("out-of-memory",)
    assert causes(others) == ("memory-held",)


def test_an_out_of_memory_while_the_model_is_built_or_moved_is_memory_others_hold():
    # The job holds nothing yet while torch.nn builds parameters or Module._apply moves them: a GPU already full.
    building = ('Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n    net = Net()\n'
                '  File "/opt/lib/python3.8/site-packages/torch/nn/modules/linear.py", line 96, in __init__\n'
                '    self.weight = Parameter(torch.empty((out_features, in_features), **factory_kwargs))\n'
                "RuntimeError: CUDA error: out of memory")
    training = ('Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n    loss.backward()\n'
                '  File "/opt/lib/python3.8/site-packages/torch/autograd/__init__.py", line 197, in backward\n'
                "RuntimeError: CUDA error: out of memory")
    assert causes(building) == ("memory-held", "out-of-memory")
    assert causes(training) == ("out-of-memory", "memory-held")
    assert causes("RuntimeError: CUDA error: out of memory") == ("out-of-memory", "memory-held")


def _tf_devices(n: int) -> str:
    return "".join(f"2024-01-01 10:00:0{i}.0: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1886] Created "
                   f"device /job:localhost/replica:0/task:0/device:GPU:{i} with 78000 MB memory:  -> device: {i}, "
                   "name: NVIDIA H100, pci bus id: 0000:00:0{i}.0, compute capability: 9.0\n" for i in range(n))


def test_strategy_on_fewer_gpus_than_registered_is_single_device_strategy():
    verdict = verdict_from_log(read_log(_tf_devices(4) + "Number of devices: 1\n"))
    assert verdict.cause_ids == ("single-device-strategy",)
    assert (verdict.present, verdict.registered, verdict.used) == (4, 4, 1)
    assert "registered 4 GPUs" in verdict.findings[0].evidence[0]


def test_every_registered_gpu_used_is_multi_gpu_ok():
    log = _tf_devices(2) + ("INFO:tensorflow:Using MirroredStrategy with devices ('/job:localhost/replica:0/task:0/"
                            "device:GPU:0', '/job:localhost/replica:0/task:0/device:GPU:1')\nNumber of devices: 2\n")
    verdict = verdict_from_log(read_log(log))
    assert verdict.cause_ids == ("multi-gpu-ok",)
    assert (verdict.registered, verdict.used) == (2, 2)


def test_jax_device_lists_are_counted():
    assert verdict_from_log(read_log("[CudaDevice(id=0)]\n")).cause_ids == ("multi-gpu-ok",)
    two = verdict_from_log(read_log("[CudaDevice(id=0), CudaDevice(id=1)]\n"))
    assert two.registered == 2 and two.cause_ids == ()  # registered, but the log does not say both were used
    assert any("2 GPU(s) registered but not how many the job used" in n for n in two.notes)
    assert verdict_from_log(read_log("[CpuDevice(id=0)]\n")).registered == 0


def test_evidence_names_log_lines():
    log = "line one\n" + "Skipping registering GPU devices...\n" + (
        "W0000 00:00:1.0    1 gpu_device.cc:2365] Cannot dlopen some GPU libraries. Please make sure the missing "
        "libraries mentioned above are installed properly.\n")
    [finding] = verdict_from_log(read_log(log)).findings
    assert finding.id == "missing-cuda-libs" and finding.evidence[0].startswith("log line 3: Cannot dlopen")


def test_every_cause_id_named_is_documented():
    for case in (ROOT / "tests" / "doctor_written_logs" / "logs").glob("*.log"):
        assert set(causes(case.read_text())) <= set(CAUSE_IDS)


def test_cli_log_json_and_exit_codes(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text("AssertionError: Torch not compiled with CUDA enabled\n")
    assert main(["doctor", "--log", str(log), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["causes"] == ["cpu-build"] and data["findings"][0]["evidence"] == [
        "log line 1: AssertionError: Torch not compiled with CUDA enabled"]
    log.write_text("hello\n")
    assert main(["doctor", "--log", str(log)]) == 0
    assert "names no cause" in " ".join(capsys.readouterr().out.split())
    assert main(["doctor", "--log", str(tmp_path / "missing.log")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_cli_log_reads_stdin(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("RuntimeError: Found no NVIDIA driver on your system.\n"))
    assert main(["doctor", "--log", "-", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["causes"] == ["no-driver"]


def test_written_fixture_logs_name_their_labelled_causes():
    """Logs we wrote from the message formats of public bug reports: a regression floor for the patterns (they are
    our words, so they never count in a figure; benchmarks/doctor_log_eval.py scores real pastes)."""
    import csv

    folder = ROOT / "tests" / "doctor_written_logs"
    lines = [ln for ln in (folder / "cases.tsv").read_text().splitlines() if ln and not ln.startswith("#")]
    cases = list(csv.DictReader(lines, delimiter="\t"))
    assert len(cases) >= 100
    right = 0
    for case in cases:
        truth = set() if case["labels"] == "-" else set(case["labels"].split(","))
        right += set(causes((folder / "logs" / f"{case['id']}.log").read_text())) == truth
    assert right / len(cases) >= 0.95


def _benchmark(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def test_real_paste_references_are_complete_and_split_by_thread():
    cache = _benchmark("doctor_log_cache")
    rows = cache.references()
    assert len({r["id"] for r in rows}) == len(rows)
    halves: dict[tuple[str, int], set[str]] = {}
    for row in rows:
        assert row["cause"] in CAUSE_IDS, row
        assert row["settled_by"] in ("maintainer", "user", "answerer") and row["settled_ref"] and row["log_in"]
        assert len(row["sha256"]) == 64 and row["round"] >= 1
        by_hash = row["round"] == 1 or row["round"] >= 4
        assert row["split"] == (cache.split_of(row["repo"], row["issue"]) if by_hash else "held-out")
        halves.setdefault((row["repo"].lower(), row["issue"]), set()).add(row["split"])
    assert all(len(s) == 1 for s in halves.values())


def test_adding_a_thread_already_collected_is_refused(tmp_path, monkeypatch):
    cache = _benchmark("doctor_log_cache")
    monkeypatch.setenv("ALLGPU_DOCTOR_LOG_CACHE", str(tmp_path / "cache"))
    refs, stage = tmp_path / "refs.jsonl", tmp_path / "stage"
    stage.mkdir()
    head = "repo: o/r\nissue: 7\nlog_in: title\ncause: no-driver\nsettled_by: user\nsettled_ref: x\n---\n"
    (stage / "r-7.txt").write_text(head + "text\n")
    assert cache.add(stage, refs, round_=4) == 1
    (stage / "r-7.txt").rename(stage / "other-id.txt")
    with pytest.raises(cache.CacheError, match="already row 'r-7'"):
        cache.add(stage, refs, round_=4)
    (stage / "other-id.txt").unlink()
    (stage / "r-7.txt").write_text(head + "changed\n")
    with pytest.raises(cache.CacheError, match="another text"):
        cache.add(stage, refs, round_=4)
    assert (tmp_path / "cache" / "r-7.log").read_text() == "text\n"


def test_missing_cache_fails_naming_what_is_missing(tmp_path):
    cache = _benchmark("doctor_log_cache")
    rows = [{"id": "a", "sha256": cache.sha256("x\n")}, {"id": "b", "sha256": cache.sha256("y\n")}]
    (tmp_path / "a.log").write_text("x\n")
    with pytest.raises(cache.CacheError, match="1 of 2 texts missing"):
        cache.load(rows, tmp_path)
    (tmp_path / "b.log").write_text("changed\n")
    with pytest.raises(cache.CacheError, match="not matching their sha256"):
        cache.load(rows, tmp_path)
    (tmp_path / "b.log").write_text("y\n")
    assert cache.load(rows, tmp_path) == {"a": "x\n", "b": "y\n"}


def test_wilson_interval():
    ev = _benchmark("doctor_log_eval")
    low, high = ev.wilson(18, 20)
    assert 0.68 < low < 0.70 and 0.97 < high < 0.98
    assert ev.wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("line, cause", [
    # Launch and loader failures a pasted log shows (message formats of PyTorch and NCCL).
    ("RuntimeError: Address already in use", "port-in-use"),
    ("[W socket.cpp:401] [c10d] The server socket has failed to listen on [::]:47531 (errno: 98 - Address already "
     "in use).", "port-in-use"),
    ("RuntimeError: Default process group has not been initialized, please make sure to call init_process_group.",
     "process-group-missing"),
    ("AssertionError: Default process group is not initialized", "process-group-missing"),
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.", "dataloader-shm"),
    ("RuntimeError: CUDA error: invalid device ordinal", "invalid-device-index"),
    ("RuntimeError: NCCL Error 2: unhandled system error", "nccl-error"),
    ("host:1:2 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-0 (size 9637888)",
     "nccl-error"),
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     "no-driver"),
    ("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.", "no-driver"),
    ("Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open shared object file: No such "
     "file or directory", "missing-cuda-libs"),
    ("Failed to get convolution algorithm. This is probably because cuDNN failed to initialize, so try looking to "
     "see if a warning log message was printed above.", "memory-held"),
    ("Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; "
     "1.25 GiB reserved in total by PyTorch)", "out-of-memory"),
    ("RuntimeError: CUDA out of memory on GPU with 4GB vram", "out-of-memory"),
    (">>> print(torch.version.cuda)\nNone", "cpu-build"),
])
def test_launch_loader_and_library_messages(line, cause):
    assert causes(line)[:1] == (cause,)


def test_libcuda_so_1_missing_is_still_the_driver():
    assert causes("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory") == (
        "no-driver",)


def test_a_failed_cuinit_wins_over_jax_falling_back_to_cpu():
    log = ("E external/xla/xla/stream_executor/cuda/cuda_driver.cc:268] failed call to cuInit: CUDA_ERROR_UNKNOWN: "
           "unknown error\nNo GPU/TPU found, falling back to CPU. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more "
           "info.)")
    assert causes(log)[:1] == ("no-driver",)


SMI = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 390.87                 Driver Version: 390.87                    |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
|===============================+======================+======================|
|   0  GeForce GTX 108...  Off  | 00000000:01:00.0  On |                  N/A |
| 31%   58C    P2    70W / 250W |   9584MiB / 11170MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_a_log_with_no_known_message_says_what_it_read():
    log = SMI + "Tensor Flow Version: 1.12.0\n"  # built with CUDA 9.0, which driver 390 runs
    verdict = verdict_from_log(read_log(log))
    notes = " ".join(verdict.notes)
    assert verdict.cause_ids == () and verdict.nothing_known
    assert "tensorflow 1.12.0" in notes and "driver 390.87" in notes and "GeForce GTX 108..." in notes
    assert "GPU 0 uses 9584 of 11170 MiB at 0% utilisation (memory held while idle)" in notes


def test_step_timing_mostly_data_wait_is_input_bound_and_an_idle_smi_row_supports_it():
    lines = ["Epoch: [0][14/5005]\tTime 0.154 (8.010)\tData 0.001 (7.720)\tLoss 6.9074 (6.9080)",
             "Epoch: [0][16/5005]\tTime 67.619 (11.054)\tData 67.544 (10.785)\tLoss 6.9076 (6.9079)"]
    verdict = verdict_from_log(read_log("\n".join(lines)))
    assert verdict.cause_ids == ("input-bound",) and "98% of the step waits for data" in verdict.findings[0].evidence[0]
    busy = "Epoch: [0][16/5005]\tTime 0.300 (0.310)\tData 0.010 (0.012)\tLoss 6.9"
    assert causes(busy) == ()
    # A snapshot of memory held at 0% utilisation alone is not enough to name a cause.
    assert causes(SMI) == ()


@pytest.mark.parametrize("text, cause", [
    # Real pastes: retyped quotes, wrapped lines, older NCCL and CUDA runtime wording, framework-specific cuBLAS text.
    ("NVIDIA-SMI has failed because it couldn\u2018t communicate with the NVIDIA driver.", "no-driver"),
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus\nerror. It is possible that dataloader's",
     "dataloader-shm"),
    ("include/socket.h:344 WARN Socket creation failed : Address family not supported by protocol", "nccl-error"),
    ("F0504 12:30:02.978602 2662 common.cpp:163] Check failed: error == cudaSuccess (30 vs. 0) unknown error",
     "no-driver"),
    ("UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment, "
     "e.g. changing env variable CUDA_VISIBLE_DEVICES after program start.", "no-driver"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`", "out-of-memory"),
    ("E tensorflow/stream_executor/cuda/cuda_blas.cc:366] failed to create cublas handle: "
     "CUBLAS_STATUS_NOT_INITIALIZED", "memory-held"),
    ("print(tf.test.is_built_with_cuda()) #  false is returned", "cpu-build"),
])
def test_real_paste_variants(text, cause):
    assert causes(text)[:1] == (cause,)


def test_lowercased_torch_oom_keeps_its_figures():
    line = ("cuda out of memory. tried to allocate 78.88 mib (gpu 0; 3.95 gib total capacity; 2.99 gib already "
            "allocated; 74.44 mib free; 557.82 mib cached)")
    assert causes(line) == ("out-of-memory",)
    held = ("cuda out of memory. tried to allocate 50.00 mib (gpu 0; 31.75 gib total capacity; 5.22 gib already "
            "allocated; 44.69 mib free; 5.22 gib reserved in total by pytorch)")
    assert causes(held) == ("memory-held",)


def test_xla_cudnn_handle_with_memory_free_and_an_old_driver_is_the_version():
    log = ("E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:474] Could not create cudnn handle: "
           "CUDNN_STATUS_NOT_INITIALIZED\n"
           "E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:478] Memory usage: 42069065728 bytes free, "
           "42505273344 bytes total.\n"
           "E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:488] Possibly insufficient driver version: 470.182.3")
    assert causes(log) == ("cuda-version-mismatch",)
