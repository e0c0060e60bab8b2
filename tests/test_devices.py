import pytest

from allgpu.devices import (Device, explain_cuda_visible_devices, parse_cuda_visible_devices, parse_device,
                            parse_devices, resolve_replica_devices, why_no_gpu)
from allgpu.errors import DeviceError


@pytest.mark.parametrize("name, expected", [
    ("/gpu:1", Device("cuda", 1)),
    ("/GPU:1", Device("cuda", 1)),
    ("GPU:1", Device("cuda", 1)),
    ("gpu:3", Device("cuda", 3)),
    ("cuda:1", Device("cuda", 1)),
    ("cuda", Device("cuda", 0)),
    ("/cpu:0", Device("cpu", 0)),
    ("CPU:0", Device("cpu", 0)),
    ("cpu", Device("cpu", 0)),
    (" /gpu:2 ", Device("cuda", 2)),
])
def test_device_names_parse(name, expected):
    assert parse_device(name) == expected


def test_full_tensorflow_name_keeps_job_and_task():
    device = parse_device("/job:worker/replica:0/task:1/device:GPU:0")
    assert (device.kind, device.index, device.task) == ("cuda", 0, ("worker", 1))
    assert parse_device("/device:CPU:0") == Device("cpu", 0)


def test_torch_device_parses():
    import torch

    assert parse_device(torch.device("cuda", 2)) == Device("cuda", 2)
    assert parse_device(torch.device("cpu")).torch_device() == torch.device("cpu")


@pytest.mark.parametrize("bad", ["/gpu:", "gpu:-1", "tpu:0", "/gpu:one", "", "/job:worker/device:GPU", "cuda:0:1"])
def test_bad_names_quote_the_name_and_the_accepted_forms(bad):
    with pytest.raises(DeviceError) as info:
        parse_device(bad)
    assert repr(bad) in str(info.value)
    assert "/gpu:N" in str(info.value) and "cuda:N" in str(info.value)


def test_device_lists_reject_duplicates_and_mixtures():
    assert parse_devices(["/cpu:0", "/cpu:1"]) == [Device("cpu", 0), Device("cpu", 1)]
    with pytest.raises(DeviceError, match="twice"):
        parse_devices(["/gpu:0", "cuda:0"])
    with pytest.raises(DeviceError, match="mixes CPU and GPU"):
        parse_devices(["/gpu:0", "/cpu:0"])
    with pytest.raises(DeviceError, match="names no device"):
        parse_devices([])


@pytest.mark.parametrize("value, effective", [
    ("0,1,2,3", ("0", "1", "2", "3")),
    ("", ()),
    ("-1", ()),
    ("0,1,x,2", ("0", "1")),
    ("1,1", ()),  # CUDA shows nothing when an entry repeats
    ("GPU-8f2a1b3c-0000-1111-2222-333344445555,GPU-1", ("GPU-8f2a1b3c-0000-1111-2222-333344445555", "GPU-1")),
    ("MIG-1a2b3c4d-0000-1111-2222-333344445555", ("MIG-1a2b3c4d-0000-1111-2222-333344445555",)),
])
def test_cuda_visible_devices_is_parsed_like_the_cuda_runtime(value, effective):
    assert parse_cuda_visible_devices(value).effective == effective


def test_cuda_visible_devices_explained():
    assert "unset" in explain_cuda_visible_devices(None)
    assert "no GPU at all" in explain_cuda_visible_devices("")
    assert "'x'" in explain_cuda_visible_devices("0,1,x,2")
    assert "no GPU at all" in why_no_gpu({"CUDA_VISIBLE_DEVICES": ""})


def test_replica_devices_without_gpu_are_cpu_replicas():
    assert resolve_replica_devices(3, None) == [Device("cpu", i) for i in range(3)]
    assert resolve_replica_devices(None, None) == [Device("cpu", 0)]
    with pytest.raises(DeviceError, match="num_replicas=2 but devices= lists 3"):
        resolve_replica_devices(2, ["/cpu:0", "/cpu:1", "/cpu:2"])
    with pytest.raises(DeviceError, match="positive"):
        resolve_replica_devices(0, None)


@pytest.mark.parametrize("raw, index, key", [(None, 3, 3), ("2,0", 0, 2), ("2,0", 1, 0),
                                             ("GPU-aa,GPU-bb", 1, "GPU-bb"), ("MIG-x", 0, "MIG-x")])
def test_nvml_selector_names_the_driver_gpu(raw, index, key):
    from allgpu.devices import nvml_selector

    assert nvml_selector(index, raw) == key


@pytest.mark.parametrize("raw", ["0", "", "0,0", "-1"])
def test_nvml_selector_past_the_list_is_a_device_error(raw):
    from allgpu.devices import nvml_selector

    with pytest.raises(DeviceError, match="cuda:1 is not visible"):
        nvml_selector(1, raw)


def test_devices_imports_no_diagnosis_tool():
    import ast
    from pathlib import Path

    import allgpu.devices

    imported = set()
    for path in Path(allgpu.devices.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert "allgpu.devices.visible" in imported  # the walk sees the package's own imports
    assert not [m for m in imported if m.startswith(("allgpu.doctor", "allgpu.monitor", "allgpu.lint"))]
