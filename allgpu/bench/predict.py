"""Scaling prediction before buying GPUs: throughput and efficiency of data-parallel training at N = 1..1024.

From one measured single-device step (:class:`StepProfile`: forward, backward and optimizer seconds, and when each
gradient bucket becomes ready during backward) and a named interconnect (:data:`INTERCONNECTS`), the all-reduce
of each bucket is costed with the alpha-beta model of ring and tree all-reduce (Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 2005; Patarasuk & Yuan 2009): a ring
moves ``2 (N-1)/N`` times the bucket's bytes through each device's link and pays ``2 (N-1)`` latencies, a tree
pays ``2 log2 N`` latencies; NCCL picks whichever is faster, and so does this model. Above one node, the
all-reduce is hierarchical (reduce-scatter inside the node, all-reduce between nodes over the node's network
bandwidth, all-gather inside). Buckets are sent one after another as soon as they are ready, overlapping the
rest of backward (DDP's and allgpu's reducer); only what is left after backward ends adds to the step.

What it leaves out (say so when comparing with measurements): input pipelines, stragglers and jitter, network
congestion beyond the link rates, compute slow-downs from sharing a host (CPU replicas), and the NCCL protocol
choices that make small messages slower than the latency term says.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

GB = 1e9


@dataclass(frozen=True)
class Interconnect:
    """A cluster's links. Bandwidths are achievable all-reduce bus bandwidths in bytes/s (about 85% of the
    line rate for networks; NCCL ``busbw`` figures for NVLink/NVSwitch); latencies in seconds per hop."""

    name: str
    per_node: int  # devices per node sharing the fast link
    intra_bw: float
    intra_lat: float
    node_bw: float  # network bandwidth of one node (all its NICs)
    node_lat: float


def _net(gbit: float, nics: int = 1) -> float:
    return 0.85 * gbit * nics / 8 * GB


INTERCONNECTS = [
    Interconnect("PCIe 4.0, 8/node, 25 GbE", 8, 20 * GB, 10e-6, _net(25), 30e-6),
    Interconnect("PCIe 4.0, 8/node, 100 GbE", 8, 20 * GB, 10e-6, _net(100), 20e-6),
    Interconnect("NVLink V100 DGX-1, 4x IB EDR 100G", 8, 130 * GB, 8e-6, _net(100, 4), 6e-6),
    Interconnect("NVSwitch A100 DGX, 8x IB HDR 200G", 8, 230 * GB, 8e-6, _net(200, 8), 5e-6),
    Interconnect("NVSwitch H100 DGX, 8x IB NDR 400G", 8, 370 * GB, 6e-6, _net(400, 8), 5e-6),
    Interconnect("1/node, InfiniBand HDR 200G", 1, 0.0, 0.0, _net(200), 5e-6),
    Interconnect("1/node, Ethernet 100 GbE", 1, 0.0, 0.0, _net(100), 20e-6),
    Interconnect("1/node, Ethernet 25 GbE", 1, 0.0, 0.0, _net(25), 30e-6),
    Interconnect("1/node, Ethernet 10 GbE", 1, 0.0, 0.0, _net(10), 50e-6),
]


def _flat(nbytes: float, n: int, bw: float, lat: float) -> float:
    """One all-reduce of ``nbytes`` among ``n`` peers on one link type: min(ring, tree) seconds."""
    if n <= 1:
        return 0.0
    transfer = 2 * (n - 1) / n * nbytes / bw
    return min(2 * (n - 1) * lat, 2 * math.ceil(math.log2(n)) * lat) + transfer


def allreduce_seconds(nbytes: float, n: int, ic: Interconnect) -> float:
    """Seconds to all-reduce ``nbytes`` across ``n`` devices on ``ic`` (hierarchical above one node)."""
    if n <= 1:
        return 0.0
    local = min(n, ic.per_node)
    nodes = math.ceil(n / local)
    inside = _flat(nbytes, local, ic.intra_bw, ic.intra_lat) if local > 1 else 0.0
    between = _flat(nbytes, nodes, ic.node_bw, ic.node_lat) if nodes > 1 else 0.0
    return inside + between


@dataclass
class StepProfile:
    """One single-device training step, measured: seconds of forward, backward and optimizer, and per gradient
    bucket (backward order) its bytes and when it was ready, in seconds after backward began."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    bucket_bytes: list[float]
    bucket_ready_s: list[float]
    batch_per_device: int
    label: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def gradient_bytes(self) -> float:
        return float(sum(self.bucket_bytes))

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


def step_seconds(p: StepProfile, n: int, ic: Interconnect, accumulation: int = 1) -> float:
    """Predicted seconds of one optimizer step on ``n`` devices: ``accumulation`` micro-batches, the last one's
    buckets all-reduced one after another from when each is ready, overlapping the rest of its backward."""
    busy_until = 0.0
    for nbytes, ready in zip(p.bucket_bytes, p.bucket_ready_s):
        busy_until = max(busy_until, ready) + allreduce_seconds(nbytes, n, ic)
    exposed = max(0.0, busy_until - p.backward_s)
    return accumulation * (p.forward_s + p.backward_s) + exposed + p.optimizer_s


def efficiency(p: StepProfile, n: int, ic: Interconnect, accumulation: int = 1) -> float:
    """Throughput on ``n`` devices over ``n`` times one device's (weak scaling, same per-device batch)."""
    return step_seconds(p, 1, ic, accumulation) / step_seconds(p, n, ic, accumulation)


def accumulation_for(p: StepProfile, n: int, ic: Interconnect, target: float = 0.9, limit: int = 4096) -> int | None:
    """Smallest power-of-two accumulation (equivalently: per-device batch multiplier) reaching ``target``
    efficiency at ``n`` devices; None when even ``limit`` does not."""
    k = 1
    while k <= limit:
        if efficiency(p, n, ic, k) >= target:
            return k
        k *= 2
    return None


def measure(model: torch.nn.Module, make_batch, *, optimizer=None, steps: int = 20, warmup: int = 5,
            bucket_cap_mb: float = 25.0, loss_fn=None) -> StepProfile:
    """Time ``steps`` single-device steps of ``model`` on ``make_batch() -> (x, y)``; medians per phase.

    Buckets are :class:`allgpu.core.sync.GradientSync`'s (:func:`allgpu.core.sync.assign_buckets`, DDP's rule); a bucket is
    ready when its last parameter's gradient is accumulated. Local.
    """
    from allgpu.core.sync import assign_buckets

    loss_fn = loss_fn or torch.nn.CrossEntropyLoss()
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    params = [p for p in model.parameters() if p.requires_grad]
    ready: dict[int, float] = {}
    handles = [p.register_post_accumulate_grad_hook(lambda q: ready.__setitem__(id(q), time.perf_counter()))
               for p in params]
    buckets = assign_buckets(params, int(bucket_cap_mb * 1024 * 1024))
    rows = []
    for i in range(warmup + steps):
        x, y = make_batch()
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if i >= warmup:
            rows.append((t1 - t0, t2 - t1, t3 - t2, [max(ready[id(p)] for p in b) - t1 for b in buckets]))
    for h in handles:
        h.remove()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return StepProfile(med([r[0] for r in rows]), med([r[1] for r in rows]), med([r[2] for r in rows]),
                       [float(sum(p.numel() * p.element_size() for p in b)) for b in buckets],
                       [med([r[3][j] for r in rows]) for j in range(len(buckets))], int(x.shape[0]))


SIZES = [2 ** i for i in range(11)]  # 1 .. 1024


def format_table(p: StepProfile, interconnects=INTERCONNECTS, sizes=SIZES) -> str:
    """Efficiency per interconnect (rows) and device count (columns), then throughput and the accumulation that
    keeps efficiency >= 90% at the largest size."""
    lines = [f"measured on one device{(' (' + p.label + ')') if p.label else ''}: step {p.compute_s * 1e3:.2f} ms "
             f"(forward {p.forward_s * 1e3:.2f}, backward {p.backward_s * 1e3:.2f}, optimizer "
             f"{p.optimizer_s * 1e3:.2f}), batch {p.batch_per_device}/device, gradients "
             f"{p.gradient_bytes / 1e6:.2f} MB in {len(p.bucket_bytes)} bucket{'s' * (len(p.bucket_bytes) != 1)}",
             "", "scaling efficiency (throughput on N devices / N x one device's), same per-device batch:",
             f"{'interconnect':<36}" + "".join(f"{n:>6}" for n in sizes)]
    for ic in interconnects:
        lines.append(f"{ic.name:<36}" + "".join(f"{efficiency(p, n, ic):>6.2f}" for n in sizes))
    one = p.batch_per_device / step_seconds(p, 1, interconnects[0])
    lines += ["", f"samples/s on one device: {one:.0f}; at N devices: N x {one:.0f} x efficiency", "",
              "accumulation steps (or per-device batch multiple) for >= 90% efficiency:",
              f"{'interconnect':<36}" + "".join(f"{n:>6}" for n in sizes)]
    for ic in interconnects:
        ks = [accumulation_for(p, n, ic) for n in sizes]
        lines.append(f"{ic.name:<36}" + "".join(f"{(k if k else '>4096')!s:>6}" for k in ks))
    return "\n".join(lines)


def plot(p: StepProfile, path, interconnects=INTERCONNECTS, sizes=SIZES) -> None:
    """Efficiency vs N, one line per interconnect, to ``path`` (PNG; matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for ic in interconnects:
        ax.plot(sizes, [efficiency(p, n, ic) for n in sizes], marker="o", label=ic.name)
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.axhline(0.9, color="grey", linestyle=":")
    ax.set_xlabel("devices")
    ax.set_ylabel("scaling efficiency")
    ax.set_title(f"predicted data-parallel scaling{(': ' + p.label) if p.label else ''}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def uniform_profile(step_s: float, gradient_bytes: float, batch: int, *, backward_share: float = 2 / 3,
                    bucket_mb: float = 25.0, label: str = "") -> StepProfile:
    """A profile from published figures only (no measurement): backward takes ``backward_share`` of the step and
    its buckets (1 MiB first, then ``bucket_mb``) become ready evenly through it."""
    sizes, left, first = [], gradient_bytes, 1024 * 1024
    while left > 0:
        take = min(left, first if not sizes else bucket_mb * 1024 * 1024)
        sizes.append(take)
        left -= take
    backward = step_s * backward_share
    done, ready = 0.0, []
    for s in sizes:
        done += s
        ready.append(backward * done / gradient_bytes)
    return StepProfile(step_s - backward, backward, 0.0, sizes, ready, batch, label)
