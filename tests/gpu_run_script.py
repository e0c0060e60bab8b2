"""Used by benchmarks/gpu_session.sh: one replica per GPU under `allgpu run`, on NCCL, training a few steps."""
import torch

import allgpu

strategy = allgpu.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    model(torch.randn(8, 16, device=strategy.device)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
total = strategy.reduce("sum", 1.0)
import torch.distributed as dist
print(f"replica {strategy.replica_id_in_sync}/{strategy.num_replicas_in_sync} on {strategy.device}, backend "
      f"{dist.get_backend()}, reduce(sum, 1) = {total.item()}")
