"""A Hugging Face model's ``save_pretrained(d)`` called on every replica (an Accelerate script ported to allgpu:
``save_pretrained(d, is_main_process=strategy.is_chief)``), then ``from_pretrained(d)``. transformers 5 writes from
rank 0 only and returns at once on the others, which then read a folder without weights (1 run in 4 with a tiny
BERT: ``OSError: Error no file named model.safetensors``). The model class here behaves as transformers 5's does
(no transformers needed); its write is slowed so the race is certain."""

import json
import os

import pytest

from allgpu.core.one_writer import read_hint
from tests.harness import run_python, write_script

SCRIPT = """
import copy, json, os, sys, time
import torch, torch.distributed as dist, allgpu

class TinyPretrained(torch.nn.Module):  # transformers 5's PreTrainedModel, as far as saving goes
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(4, 3)
    def forward(self, x):
        return self.dense(x)
    def save_pretrained(self, save_directory, is_main_process=True, state_dict=None):
        os.makedirs(save_directory, exist_ok=True)
        if is_main_process and (not dist.is_initialized() or dist.get_rank() == 0):
            time.sleep(1.0)  # a big model's write
            state = self.state_dict() if state_dict is None else state_dict
            torch.save({k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()},
                       os.path.join(save_directory, "weights.pt"))  # a sharded model's: a collective, unmet
    @classmethod
    def from_pretrained(cls, save_directory):
        path = os.path.join(save_directory, "weights.pt")
        if not os.path.exists(path):
            raise OSError(f"Error no file named weights.pt found in directory {save_directory}.")
        model = cls()
        model.load_state_dict(torch.load(path, weights_only=True))
        return model

out, mode = sys.argv[1], sys.argv[2]
devices = ["/cpu:0", "/cpu:1"]
strategy = allgpu.FullyShardedStrategy(devices=devices) if mode == "fsdp" else allgpu.MirroredStrategy(devices=devices)
with strategy.scope():
    model = TinyPretrained()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
os.makedirs("model_out", exist_ok=True)
if strategy.is_chief:
    open("model_out/tokenizer.json", "w").write("{}")
strategy.barrier()
ok = []
for step in range(2):
    model(torch.randn(2, 4)).sum().backward(); optimizer.step(); optimizer.zero_grad()
    model.save_pretrained("model_out", is_main_process=strategy.is_chief)
    again = TinyPretrained.from_pretrained("model_out")
    mine = strategy.full_state_dict(model)  # replica 0's under FullyShardedStrategy, {} elsewhere
    ok.append(all(torch.equal(again.state_dict()[k], v) for k, v in mine.items()) and bool(mine or mode == "fsdp"))
if mode == "mirrored":  # a Hugging Face model inside a module of the user's: model.bert.save_pretrained(d)
    with strategy.scope():
        outer = torch.nn.Sequential(TinyPretrained(), torch.nn.ReLU())
    outer[0].save_pretrained("inner_out")
    again = TinyPretrained.from_pretrained("inner_out")
    ok[-1] = ok[-1] and all(torch.equal(again.state_dict()[k], v) for k, v in outer[0].state_dict().items())
    mirrored = strategy.mirror(torch.nn.Sequential(TinyPretrained()))  # built outside the scope
    ok[-1] = ok[-1] and "save_pretrained" not in copy.deepcopy(mirrored)[0].__dict__  # copies without it
ok.append(os.path.exists("model_out/tokenizer.json"))  # written in place: the folder keeps its other files
ok.append(mode == "fsdp" or "save_pretrained" not in copy.deepcopy(model).__dict__)  # a copy is a plain module
json.dump(ok, open(os.path.join(out, f"r{strategy.replica_id_in_sync}.json"), "w"))
"""


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["mirrored", "fsdp"])
def test_save_pretrained_on_every_replica_writes_once_and_loads_everywhere(tmp_path, mode):
    """Under FullyShardedStrategy the model's own method met shards (transformers: safetensors' bare
    'Attempted to access the data pointer on an invalid python storage'): the weights are gathered first."""
    script = write_script(tmp_path, "train.py", SCRIPT)
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir(), work.mkdir()
    result = run_python([str(script), str(out), mode], timeout=240, cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    oks = {r: json.loads((out / f"r{r}.json").read_text()) for r in range(2)}
    assert all(ok == [True] * 4 for ok in oks.values()), oks
    assert not [p for p in os.listdir(work / "model_out") if p.startswith(".allgpu-tmp")]


@pytest.mark.unit
def test_a_guarded_save_pretrained_read_early_gets_the_note():
    """transformers' and safetensors' wordings for a folder or file not yet written."""
    missing = OSError("Error no file named model.safetensors, or pytorch_model.bin, found in directory out.")
    assert "strategy.barrier()" in read_hint(missing, 1)
    partial = type("SafetensorError", (Exception,), {})("Error while deserializing header: HeaderTooSmall")
    assert "save_pretrained" in read_hint(partial, 1)
    assert read_hint(missing, 0) is None
