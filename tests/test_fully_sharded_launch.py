"""FullyShardedStrategy is launched the ways MultiWorkerMirroredStrategy is: here two TF_CONFIG workers started by
hand (no launcher) form one sharded job, each worker holding half of every parameter."""

import json

import pytest

from tests.harness import free_port, start_python, write_script

pytestmark = pytest.mark.replicas

WORKER = """
import torch, allgpu
strategy = allgpu.FullyShardedStrategy(timeout=60)
torch.manual_seed(0)
with strategy.scope():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
held = sum(p.to_local().numel() for p in model.parameters())
total = sum(p.numel() for p in model.parameters())
torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 0, 1])).backward()
optimizer.step()
print("replicas", strategy.num_replicas_in_sync, "rank", strategy.replica_id_in_sync, "held", held, "of", total,
      flush=True)
"""


@pytest.mark.timeout(120)
def test_two_tf_config_workers_form_one_sharded_job(tmp_path):
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    script = write_script(tmp_path, "worker.py", WORKER)
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        procs.append(start_python([str(script)], env={"TF_CONFIG": tf_config}))
    outs = [p.communicate(timeout=100)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for rank, out in enumerate(outs):
        assert f"replicas 2 rank {rank} held" in out, out
        held, total = (int(v) for v in out.split("held ")[1].split()[::2][:2])
        assert held <= total // 2 + 16, out  # about half (dim-0 shards of odd sizes round up)
