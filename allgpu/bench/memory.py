"""Memory benchmark (``allgpu bench --memory``): what one replica holds under each strategy, and the speed cost.

One model with repeated blocks and Adam trains a few steps under ``OneDeviceStrategy``, ``MirroredStrategy`` and
``FullyShardedStrategy`` at N replicas, each job in its own processes (``allgpu.launch``). Per replica it reports
the bytes held between steps, counted tensor by tensor: parameters, gradients (right after backward) and optimizer
state (for a ``DTensor``, its local shard only). Gathered parameters that FSDP holds for one unit at a time
during forward and backward are transient and not counted on CPU; on CUDA the report adds
``torch.cuda.max_memory_allocated``, which includes them. Throughput is global samples/s over the timed steps
(the slowest replica's time), the median of ``rounds`` runs alternating Mirrored and FullySharded.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

WIDTH, HIDDEN, BLOCKS, CLASSES, BATCH = 512, 1024, 8, 10, 64


class MLPBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


def blocks_model() -> nn.Module:
    """8 residual MLP blocks of width 512 (hidden 1024) and a head: 8.4M parameters."""
    return nn.Sequential(*[MLPBlock() for _ in range(BLOCKS)], nn.Linear(WIDTH, CLASSES))


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(tensors) -> int:
    return sum(_local(t).numel() * t.element_size() for t in tensors)


def _strategy(kind: str, device: str):
    import allgpu

    return {"one_device": lambda: allgpu.OneDeviceStrategy("cuda:0" if device == "cuda" else "/cpu:0"),
            "mirrored": allgpu.MirroredStrategy, "fully_sharded": allgpu.FullyShardedStrategy}[kind]()


def _replica(kind: str, steps: int, warmup: int, device_kind: str = "cpu") -> dict:
    """One replica's figures: bytes held (params, grads, optimizer state), samples/s of the job, CUDA peak."""
    strategy = _strategy(kind, device_kind)
    torch.manual_seed(0)
    with strategy.scope():
        model = blocks_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    device, n = strategy.device, strategy.num_replicas_in_sync
    per_replica = BATCH // n
    g = torch.Generator().manual_seed(strategy.replica_id_in_sync)
    x = torch.randn(per_replica, WIDTH, generator=g).to(device)
    y = torch.randint(0, CLASSES, (per_replica,), generator=g).to(device)
    grads = 0
    for i in range(warmup + steps):
        if i == warmup:
            strategy.barrier()
            start = time.perf_counter()
        nn.functional.cross_entropy(model(x), y).backward()
        grads = _nbytes(p.grad for p in model.parameters() if p.grad is not None)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = float(strategy.reduce("max", time.perf_counter() - start))
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    out = {"params": _nbytes(model.parameters()), "grads": grads, "optimizer": _nbytes(state),
           "samples_per_s": BATCH * steps / seconds,
           "cuda_peak": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None}
    strategy.close()
    return out


@dataclass
class MemoryRow:
    strategy: str
    replicas: int
    params: int
    grads: int
    optimizer: int
    samples_per_s: float
    cuda_peak: int | None

    @property
    def held(self) -> int:
        return self.params + self.grads + self.optimizer


def _launch(kind: str, replicas: int, device: str, steps: int, warmup: int) -> MemoryRow:
    import allgpu

    devices = [f"/{'gpu' if device == 'cuda' else 'cpu'}:{i}" for i in range(replicas)]
    results = allgpu.launch(_replica, devices=devices, args=(kind, steps, warmup, device),
                            start_method="spawn" if device == "cuda" else None)
    worst = max(results, key=lambda r: r["params"] + r["grads"] + r["optimizer"])  # the replica holding most
    return MemoryRow(kind, replicas, worst["params"], worst["grads"], worst["optimizer"], worst["samples_per_s"],
                     max((r["cuda_peak"] or 0) for r in results) or None)


def measure(replica_counts=(2, 4), *, device: str = "cpu", steps: int = 20, warmup: int = 3,
            rounds: int = 3) -> list[MemoryRow]:
    """One row for OneDevice and, per count, Mirrored and FullySharded (throughput: median of ``rounds``)."""
    rows = [_launch("one_device", 1, device, steps, warmup)]
    for n in replica_counts:
        runs: dict[str, list[MemoryRow]] = {"mirrored": [], "fully_sharded": []}
        for _ in range(rounds):
            for kind in runs:
                runs[kind].append(_launch(kind, n, device, steps, warmup))
        for kind, measured in runs.items():
            row = measured[0]
            row.samples_per_s = statistics.median(r.samples_per_s for r in measured)
            rows.append(row)
    return rows


def format_rows(rows: list[MemoryRow]) -> str:
    """The table ``allgpu bench --memory`` prints (MiB per replica; ratios against OneDevice and Mirrored)."""
    base = rows[0].held
    mib = 2 ** 20
    lines = [f"model: {sum(p.numel() for p in blocks_model().parameters()) / 1e6:.1f}M parameters, Adam, "
             f"global batch {BATCH}",
             f"{'strategy':<14}{'replicas':>9}{'params MiB':>12}{'grads MiB':>11}{'optim MiB':>11}{'held MiB':>10}"
             f"{'vs 1 dev':>9}{'samples/s':>11}{'FS/Mirrored':>13}" + ("  CUDA peak MiB" if rows[0].cuda_peak else "")]
    speed = {(r.strategy, r.replicas): r.samples_per_s for r in rows}
    for r in rows:
        ratio = ""
        if r.strategy == "fully_sharded" and ("mirrored", r.replicas) in speed:
            ratio = f"{r.samples_per_s / speed[('mirrored', r.replicas)]:.2f}"
        line = (f"{r.strategy:<14}{r.replicas:>9}{r.params / mib:>12.2f}{r.grads / mib:>11.2f}"
                f"{r.optimizer / mib:>11.2f}{r.held / mib:>10.2f}{r.held / base:>9.2f}{r.samples_per_s:>11.0f}"
                f"{ratio:>13}")
        if r.cuda_peak:
            line += f"{r.cuda_peak / mib:>15.0f}"
        lines.append(line)
    return "\n".join(lines)
