"""Throughput benchmark: allgpu ``MirroredStrategy`` against hand-written PyTorch DDP, and scaling.

Both sides train the same model on the same in-memory batches with the same optimizer, in replicas started
the same way (``allgpu.launch``), so the only difference is how gradients are synchronised: allgpu's
post-accumulate-grad hooks and bucketed async all-reduce, or ``torch.nn.parallel.DistributedDataParallel``'s
C++ reducer. Runs alternate (allgpu, DDP, allgpu, ...) and the median of each is reported, which keeps a noisy
machine from favouring one side.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:  # imported on use: predicting needs none of this module's start-up cost
    from allgpu.bench.predict import Interconnect, StepProfile

MODELS = {
    # name: (builder, input shape per example, classes, global batch size)
    "digits_cnn": ("allgpu.bench.demo:digits_cnn", (1, 8, 8), 10, 64),
    "mlp_1m": ("allgpu.bench.throughput:mlp_1m", (784,), 10, 128),
}


def mlp_1m() -> nn.Module:
    """784-1024-256-10 MLP: 1.07M parameters."""
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 10))


def _build(path: str) -> nn.Module:
    module, name = path.split(":")
    return getattr(__import__(module, fromlist=[name]), name)()


def _batches(shape, classes, per_replica, count, device, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(per_replica, *shape, generator=g).to(device),
             torch.randint(0, classes, (per_replica,), generator=g).to(device)) for _ in range(count)]


def _timed_loop(model, optimizer, batches, warmup, device, step: bool = True) -> float:
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(batches):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        loss_fn(model(x), y).backward()
        if step:  # else optimizer-in-backward stepped it
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


KINDS = ("allgpu", "ddp", "allgpu_oib")  # allgpu_oib: optimizer-in-backward
# Compiled runs add DDP around a compiled module: torch.compile(DDP(model)), as the PyTorch docs write it, captures
# no graph in torch 2.13 (Dynamo breaks in DDP.forward, pytorch/pytorch#140416) and so runs eager.
DDP_INNER = "ddp_inner"


def _replica(kind: str, model_name: str, steps: int, warmup: int, device_kind: str,
             backend: str | None = None, global_batch: int | None = None) -> float:
    """One replica's run; returns the job's samples/s (global batch x steps / slowest replica's seconds).

    ``backend``: compile the model with ``torch.compile(backend=...)`` (DDP: ``torch.compile(DDP(model))``)."""
    import torch.distributed as dist

    import allgpu

    builder, shape, classes, default_batch = MODELS[model_name]
    global_batch = global_batch or default_batch
    in_backward = kind == "allgpu_oib"
    if kind.startswith("allgpu"):
        strategy = allgpu.MirroredStrategy()
        device, world = strategy.device, strategy.num_replicas_in_sync
        torch.manual_seed(0)
        with strategy.scope():
            model = _build(builder)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if in_backward:
            strategy.optimizer_in_backward(optimizer)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        local = int(__import__("os").environ["LOCAL_RANK"])
        device = torch.device("cuda", local) if device_kind == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        world = dist.get_world_size()
        torch.manual_seed(0)
        module = _build(builder).to(device)
        if kind == DDP_INNER:
            module, backend = torch.compile(module, backend=backend), None
        model = DDP(module, device_ids=[device] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = _batches(shape, classes, global_batch // world, warmup + steps, device, seed=dist.get_rank()
                       if dist.is_initialized() else 0)
    if backend is not None:
        model = torch.compile(model, backend=backend)
    seconds = _timed_loop(model, optimizer, batches, warmup, device, step=not in_backward)
    # DDP's reducer holds the process group: freed after destroy_process_group (at return), its Gloo destructor
    # waited forever on a worker thread in one bench run. Free it while the group is alive.
    del model, optimizer
    __import__("gc").collect()
    if dist.is_initialized():
        t = torch.tensor([seconds], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        seconds = float(t)
        dist.destroy_process_group()
    return global_batch * steps / seconds


def _replica_graphs(*args) -> tuple[float, int]:
    """:func:`_replica`, and how many graphs Dynamo captured in this process (0: the compiled side ran eager)."""
    from torch._dynamo.utils import counters

    rate = _replica(*args)
    return rate, int(counters["stats"]["unique_graphs"])


@dataclass
class Comparison:
    """Median samples/s of each side; ``ratios`` are medians of the per-round ratios against DDP (each round runs
    every side once, back to back, so a load change hits both sides of a ratio alike)."""

    model: str
    replicas: int
    device: str
    allgpu_samples_per_s: float
    ddp_samples_per_s: float
    backend: str | None = None
    oib_samples_per_s: float | None = None
    ratios: dict = field(default_factory=dict)
    graphs: dict = field(default_factory=dict)  # compiled runs: graphs Dynamo captured per side (replica 0)

    @property
    def ratio(self) -> float:
        return self.ratios.get("allgpu", self.allgpu_samples_per_s / self.ddp_samples_per_s)


def compare(model_name: str, *, replicas: int = 2, device: str = "cpu", steps: int = 200, warmup: int = 20,
            rounds: int = 5, backend: str | None = None, optimizer_in_backward: bool = True) -> Comparison:
    """Alternating runs (allgpu, DDP[, allgpu with optimizer-in-backward]) x ``rounds`` on ``replicas`` replicas,
    compiled with ``backend`` when given; medians reported."""
    import allgpu

    devices = [f"/{'gpu' if device == 'cuda' else 'cpu'}:{i}" for i in range(replicas)]
    kinds = KINDS if optimizer_in_backward else KINDS[:2]
    if backend is not None:
        kinds += (DDP_INNER,)
    runs: dict[str, list[float]] = {k: [] for k in kinds}
    graphs: dict[str, int] = {}
    for _ in range(rounds):
        for kind in kinds:
            runs[kind].append(allgpu.launch(_replica_graphs, devices=devices,
                                            args=(kind, model_name, steps, warmup, device, backend),
                                            start_method="spawn" if device == "cuda" else None)[0])
            graphs[kind] = runs[kind][-1][1]
    rates = {k: [r for r, _ in v] for k, v in runs.items()}
    ratios = {k: statistics.median(a / d for a, d in zip(rates[k], rates["ddp"])) for k in kinds if k != "ddp"}
    if backend is not None:
        ratios["allgpu_vs_ddp_inner"] = statistics.median(a / d for a, d in zip(rates["allgpu"], rates[DDP_INNER]))
    oib = statistics.median(rates["allgpu_oib"]) if optimizer_in_backward else None
    return Comparison(model_name, replicas, device, statistics.median(rates["allgpu"]),
                      statistics.median(rates["ddp"]), backend, oib, ratios, graphs if backend else {})


def scaling(model_name: str, *, replicas: int = 2, device: str = "cpu", steps: int = 200, warmup: int = 20) -> dict:
    """allgpu samples/s at 1 and at ``replicas`` replicas, same global batch (strong scaling)."""
    import allgpu

    out = {}
    for n in sorted({1, replicas}):
        devices = [f"/{'gpu' if device == 'cuda' else 'cpu'}:{i}" for i in range(n)]
        out[n] = allgpu.launch(_replica, devices=devices, args=("allgpu", model_name, steps, warmup, device),
                               start_method="spawn" if device == "cuda" else None)[0]
    return out


def format_comparisons(rows: list[Comparison]) -> str:
    lines = [f"{'model':<12} {'replicas':>8} {'device':>6} {'compiled':>9} {'allgpu samples/s':>17} "
             f"{'DDP samples/s':>14} {'allgpu/DDP':>10} {'in-backward/DDP':>16}"]
    for r in rows:
        oib = f"{r.ratios['allgpu_oib']:>16.3f}" if "allgpu_oib" in r.ratios else f"{'-':>16}"
        lines.append(f"{r.model:<12} {r.replicas:>8} {r.device:>6} {r.backend or 'no':>9} "
                     f"{r.allgpu_samples_per_s:>17.0f} {r.ddp_samples_per_s:>14.0f} {r.ratio:>10.3f} {oib}")
    for r in rows:
        if "allgpu_vs_ddp_inner" in r.ratios:
            lines.append(f"{r.model} compiled: allgpu / DDP(torch.compile(model)) {r.ratios['allgpu_vs_ddp_inner']:.3f}; "
                         f"graphs Dynamo captured: allgpu {r.graphs.get('allgpu')}, torch.compile(DDP(model)) "
                         f"{r.graphs.get('ddp')}, DDP(torch.compile(model)) {r.graphs.get(DDP_INNER)}"
                         + (" (0: that side ran eager)" if r.graphs.get("ddp") == 0 else ""))
    return "\n".join(lines)


def profile_model(model_name: str, device: str = "cpu", per_device_batch: int | None = None) -> "StepProfile":
    """Measure one device's training step of a benchmark model (:func:`allgpu.bench.predict.measure`)."""
    from allgpu.bench.predict import measure

    builder, shape, classes, global_batch = MODELS[model_name]
    batch = per_device_batch or global_batch
    dev = torch.device(device)
    torch.manual_seed(0)
    model = _build(builder).to(dev)
    data = _batches(shape, classes, batch, 8, dev, seed=0)
    state = {"i": 0}

    def make_batch():
        state["i"] += 1
        return data[state["i"] % len(data)]

    profile = measure(model, make_batch)
    profile.label = f"{model_name} on {device}"
    return profile


def _allreduce_time(nbytes: int, repeats: int) -> float:
    import torch.distributed as dist

    import allgpu

    strategy = allgpu.MirroredStrategy()
    t = torch.zeros(nbytes // 4)
    for _ in range(3):
        dist.all_reduce(t)
    start = time.perf_counter()
    for _ in range(repeats):
        dist.all_reduce(t)
    seconds = (time.perf_counter() - start) / repeats
    strategy.close()
    return seconds


def loopback_interconnect(replicas: int = 2) -> "Interconnect":
    """Gloo over loopback, measured: latency and bandwidth fitted to all-reduces of 4 KiB and 4 MiB."""
    import allgpu
    from allgpu.bench.predict import Interconnect

    small, big = 4096, 4 * 1024 * 1024
    t_small = allgpu.launch(_allreduce_time, num_replicas=replicas, args=(small, 50))[0]
    t_big = allgpu.launch(_allreduce_time, num_replicas=replicas, args=(big, 10))[0]
    factor = 2 * (replicas - 1) / replicas
    bandwidth = factor * (big - small) / max(t_big - t_small, 1e-9)
    latency = max(t_small - factor * small / bandwidth, 1e-7) / (2 * (replicas - 1))
    return Interconnect("Gloo loopback (measured)", 64, bandwidth, latency, bandwidth, latency)


def weak_scaling(model_name: str, replicas=(1, 2, 4), steps: int = 100, warmup: int = 10) -> dict[int, float]:
    """allgpu samples/s at each replica count with the benchmark's per-device batch fixed (weak scaling)."""
    import allgpu

    global_batch = MODELS[model_name][3]
    out = {}
    for n in replicas:
        out[n] = allgpu.launch(_replica, num_replicas=n, args=("allgpu", model_name, steps, warmup, "cpu", None,
                                                              global_batch * n))[0]
    return out
