"""A DDP port that keeps `model.module` gets a note naming the fix on nn.Module's bare AttributeError."""

import pytest
import torch

from allgpu.core.port_hints import ddp_module_hint
from tests.harness import run_python, write_script


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    raise AssertionError("nothing raised")


@pytest.mark.unit
def test_the_note_is_for_a_torch_module_asked_for_module_only():
    model = torch.nn.Linear(2, 2)
    note = ddp_module_hint(_raised(lambda: model.module.state_dict()))
    assert note and "your own Linear, not a DistributedDataParallel wrapper" in note and "model.state_dict()" in note

    class Plain:
        pass
    assert ddp_module_hint(_raised(lambda: Plain().module)) is None  # not a torch module: nothing said
    assert ddp_module_hint(_raised(lambda: model.modules_x)) is None
    assert ddp_module_hint(ValueError("'Linear' object has no attribute 'module'")) is None


PORT = """
import torch, allgpu
strategy = allgpu.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = torch.nn.Linear(4, 2)
torch.save(model.module.state_dict(), "model.pt")  # the DDP script's line, kept
"""


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_a_ported_ddp_save_names_the_fix_in_its_traceback(tmp_path):
    script = write_script(tmp_path, "train.py", PORT)
    result = run_python([str(script)], timeout=100, cwd=tmp_path)
    assert result.returncode != 0
    assert "AttributeError: 'Linear' object has no attribute 'module'" in result.stderr, result.stderr[-2000:]
    assert "not a DistributedDataParallel wrapper" in result.stderr, result.stderr[-2000:]
