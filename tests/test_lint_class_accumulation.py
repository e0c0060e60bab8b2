"""PT006 across the methods of a trainer class (issue 21, tuning half a0504, ParlAI's TorchAgent): ``backward()``
runs on every call while ``update_params()`` steps only every k calls (an early return until a counter kept modulo k
comes round), and a subclass in a module beside it wraps the model in DistributedDataParallel. Written projects:
reported at the backward; not when the class syncs through no_sync, steps on every call, or nothing wraps in DDP."""

import textwrap

import pytest

from allgpu.lint import check_path
from allgpu.lint.catalog import RULES

AGENT = """
import torch

class TorchAgent:
    def backward(self, loss):
        update_freq = self.opt.get("update_freq", 1)
        if update_freq > 1:
            loss = loss / update_freq
        {backward}

    def update_params(self):
        update_freq = self.opt.get("update_freq", 1)
        if update_freq > 1:
            {counter}
            if self._number_grad_accum != 0:
                return
        self.optimizer.step()
"""

GENERATOR = """
import torch
from .torch_agent import TorchAgent

class TorchGeneratorAgent(TorchAgent):
    def __init__(self, opt):
        self.model = self.build_model()
        if opt.get("distributed"):
            self.model = torch.nn.parallel.{wrapper}(self.model, device_ids=[opt["gpu"]])

    def train_step(self, batch):
        loss = self.compute_loss(batch)
        self.backward(loss)
        self.update_params()
"""

PLAIN = "loss.backward()"
SYNCED = ("if self._number_grad_accum != self.opt['update_freq'] - 1:\n            with self.model.no_sync():\n"
          "                loss.backward()\n            return\n        loss.backward()")
COUNTER = "self._number_grad_accum = (self._number_grad_accum + 1) % update_freq"


def _pt006(tmp_path, backward, counter, wrapper):
    pkg = tmp_path / "parlai" / "core"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "torch_agent.py").write_text(textwrap.dedent(AGENT).format(backward=backward, counter=counter))
    (pkg / "torch_generator_agent.py").write_text(textwrap.dedent(GENERATOR).format(wrapper=wrapper))
    return [f.line for f in check_path(pkg / "torch_agent.py", select=list(RULES)) if f.rule_id == "PT006"]


@pytest.mark.parametrize("backward,counter,wrapper,reported", [
    (PLAIN, COUNTER, "DistributedDataParallel", True),  # ParlAI before its fix
    (SYNCED, COUNTER, "DistributedDataParallel", False),  # the class decides when gradients sync
    (PLAIN, "self._number_grad_accum = 0", "DistributedDataParallel", False),  # steps on every call
    (PLAIN, COUNTER, "DataParallel", False),  # no DDP anywhere in the project
])
def test_backward_and_step_in_two_methods_of_a_class_wrapped_in_ddp_beside_it(tmp_path, backward, counter, wrapper,
                                                                             reported):
    assert bool(_pt006(tmp_path, backward, counter, wrapper)) is reported


def test_same_class_in_a_file_that_wraps_it_itself(tmp_path):
    src = textwrap.dedent(AGENT).format(backward=PLAIN, counter=COUNTER) + textwrap.dedent("""
    def main(opt):
        agent = TorchAgent()
        agent.model = torch.nn.parallel.DistributedDataParallel(agent.model)
    """)
    (tmp_path / "agent.py").write_text(src)
    assert [f.rule_id for f in check_path(tmp_path / "agent.py", select=list(RULES))].count("PT006") == 1
