"""CUDA_VISIBLE_DEVICES parsing and mapping, checked against PyTorch's own parser where it has one."""

from __future__ import annotations

import pytest
import torch

from allgpu.doctor.reading import GpuReading
from allgpu.doctor.visible import explain, map_to_driver, parse_visible_devices

UUIDS = ["GPU-5f1b1c3e-8d2a-4b7e-9c1d-2a6f0e4b7c11", "GPU-a2c4e6f8-1b3d-4f5a-8c7e-9d0b2f4a6c22",
         "GPU-a2c9d8c7-6a5f-4e3d-2c1b-0a9f8e7d6c33", "GPU-7c6b5a49-3827-4160-9f8e-7d6c5b4a3944"]
MIG = ("MIG-4a0d5c2e-91b3-5f8d-a7c6-3e2b1d0f9a11", "MIG-b7e6d5c4-a3b2-5c1d-8e9f-0a1b2c3d4e22")
GPUS = tuple(GpuReading(i, "NVIDIA A100-SXM4-80GB", u, mig_devices=MIG if i == 0 else ())
             for i, u in enumerate(UUIDS))

RAW_VALUES = ["0", "0,1,2,3", "3,1", "-1", "", "0,1,-1,2", "0,,1", "0,1,", "0,0", "1,0,1", "1gpu", "0 1 2 3",
              " 0, 1", "+1", "a,0", "0,a,1", UUIDS[1], f"{UUIDS[0]},{UUIDS[2]}", "GPU-a2c", f"{UUIDS[0]},0",
              f"{UUIDS[0]},{UUIDS[0]}", MIG[0], f"{MIG[0]},{MIG[1]}"]


@pytest.mark.parametrize("raw", RAW_VALUES)
def test_effective_entries_match_torch_parser(raw, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", raw)
    expected = torch.cuda._parse_visible_devices()
    got = parse_visible_devices(raw).effective
    if parse_visible_devices(raw).form == "index":
        assert [int(x) for x in got] == expected
    else:
        assert list(got) == expected


@pytest.mark.parametrize("raw", ["0", "3,1", "0,1,2,3,4", "5,0", f"{UUIDS[3]},{UUIDS[1][:8]}", "GPU-a2c",
                                 "GPU-ffff", f"{UUIDS[0]},GPU-5f1b", "7"])
def test_mapping_matches_torch_nvml_count(raw, monkeypatch):
    """torch's _device_count_nvml logic, fed the same UUIDs / GPU count, counts what we map."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", raw)
    visible = torch.cuda._parse_visible_devices()
    if visible and isinstance(visible[0], str):
        expected = len(torch.cuda._transform_uuid_to_ordinals(visible, UUIDS))
    else:
        expected = next((i for i, v in enumerate(visible) if v >= len(UUIDS)), len(visible))
    mapping = map_to_driver(parse_visible_devices(raw), GPUS)
    assert len(mapping.torch_to_driver) == expected


def test_unset_shows_every_gpu():
    v = parse_visible_devices(None)
    assert v.form == "unset" and not v.malformed
    m = map_to_driver(v, GPUS)
    assert m.torch_to_driver == (0, 1, 2, 3) and m.hidden == ()


def test_zero_hides_three_and_explains_it():
    v = parse_visible_devices("0")
    m = map_to_driver(v, GPUS)
    assert m.torch_to_driver == (0,) and m.hidden == (1, 2, 3)
    assert explain(v, m) == "CUDA_VISIBLE_DEVICES=0: PyTorch sees 1 GPU (cuda:0 = GPU 0); GPUs 1, 2, 3 hidden."


def test_reordering_maps_torch_index_to_driver_index():
    m = map_to_driver(parse_visible_devices("3,1"), GPUS)
    assert m.torch_to_driver == (3, 1) and m.hidden == (0, 2)


@pytest.mark.parametrize("raw", ["", "-1", "0,-1"])
def test_intentional_hiding_is_not_malformed(raw):
    assert not parse_visible_devices(raw).malformed


def test_empty_value_hides_everything():
    v = parse_visible_devices("")
    assert v.form == "empty" and map_to_driver(v, GPUS).torch_to_driver == ()
    assert "empty" in explain(v)


@pytest.mark.parametrize("raw, stopper, dropped", [("0,1,-1,2", "-1", ("2",)), ("0,a,1", "a", ("1",)),
                                                   ("0,,1", "", ("1",))])
def test_entries_after_a_stopper_are_dropped_and_flagged(raw, stopper, dropped):
    v = parse_visible_devices(raw)
    assert v.stopper == stopper and v.dropped == dropped and v.malformed
    assert "ignored" in explain(v)


def test_duplicate_hides_everything():
    v = parse_visible_devices("1,0,1")
    assert v.duplicate == "1" and v.effective == () and v.malformed
    assert map_to_driver(v, GPUS).torch_to_driver == ()
    assert "listed twice" in explain(v)


def test_spaces_instead_of_commas_read_as_first_index():
    v = parse_visible_devices("0 1 2 3")
    assert v.effective == ("0",) and v.lenient == ("0 1 2 3",) and v.malformed
    assert "is read as 0" in explain(v)


def test_index_past_last_gpu_ends_the_list():
    m = map_to_driver(parse_visible_devices("1,7,2"), GPUS)
    assert m.torch_to_driver == (1,) and m.unresolved == "7"
    assert "past the last GPU" in m.unresolved_reason


def test_uuid_prefix_unique_and_ambiguous():
    assert map_to_driver(parse_visible_devices("GPU-7c6b"), GPUS).torch_to_driver == (3,)
    m = map_to_driver(parse_visible_devices("GPU-a2c"), GPUS)
    assert m.torch_to_driver == () and "ambiguous" in m.unresolved_reason


def test_unknown_uuid_reports_reason():
    m = map_to_driver(parse_visible_devices("GPU-0000dead"), GPUS)
    assert m.unresolved == "GPU-0000dead" and "matches no GPU" in m.unresolved_reason


def test_two_prefixes_of_one_gpu_count_as_a_repeat():
    m = map_to_driver(parse_visible_devices(f"{UUIDS[0]},GPU-5f1b"), GPUS)
    assert m.torch_to_driver == () and "second time" in m.unresolved_reason


def test_mixed_forms_stop_at_first_other_form():
    v = parse_visible_devices(f"{UUIDS[0]},1")
    assert v.form == "gpu-uuid" and v.effective == (UUIDS[0],) and v.stopper == "1" and v.malformed


def test_mig_uuid_maps_to_parent_gpu():
    v = parse_visible_devices(MIG[1])
    m = map_to_driver(v, GPUS)
    assert v.form == "mig-uuid" and m.torch_to_driver == (0,)
    assert "MIG instance of GPU 0" in explain(v, m)


def test_old_style_mig_name_maps_to_parent_gpu():
    m = map_to_driver(parse_visible_devices(f"MIG-{UUIDS[2]}/1/0"), GPUS)
    assert m.torch_to_driver == (2,)


def test_torch_uuids_override_prediction():
    """When torch reports UUIDs (without the GPU- prefix), the mapping comes from them."""
    m = map_to_driver(parse_visible_devices(None), GPUS, [UUIDS[2][4:], UUIDS[0][4:]])
    assert m.from_torch and m.torch_to_driver == (2, 0) and m.hidden == (1, 3)
