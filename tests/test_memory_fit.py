"""``needs-sharding``: the arithmetic (allgpu/devices/advice.py), the torch count (strategies/memory_advice.py), the
monitor's rule and its reading edge, on one process. Real replicas: tests/test_memory_fit_replicas.py."""

import pytest
import torch

from allgpu.devices.advice import MEMORY_HEADROOM, MemoryFit, human_bytes, memory_finding, optimizer_slots
from allgpu.errors import ArgumentError
from allgpu.monitor import ReplicaFigures, StepMonitor, diagnose
from allgpu.core import memory_fit as memory_advice
from allgpu.core.memory_fit import measure


def test_zero_accounting_per_optimizer():
    assert [optimizer_slots(n) for n in ("Adam", "AdamW", "SGD", "RMSprop", "MyOptimizer")] == [2, 2, 0, 1, 2]
    assert optimizer_slots("SGD", momentum=True) == 1 and optimizer_slots(None) == 0
    fit = MemoryFit(params=1000, param_bytes=4000, trainable_bytes=3000, optimizer="Adam", slots=2, replicas=4,
                    device_bytes=None)
    assert fit.mirrored_bytes == 4000 + 3000 * 3  # every parameter; gradient and two moments for trainable ones
    assert fit.sharded_bytes == -(-13000 // 4) and fit.fits_mirrored and fit.devices_needed == 1
    assert memory_finding(fit) is None  # no device limit (a CPU replica): nothing to say
    assert MemoryFit.from_dict(fit.to_dict()) == fit and fit.to_dict()["mirrored_bytes"] == 13000


def _fit(device_bytes, replicas=2):
    return MemoryFit(17668, 70672, 70672, "Adam", 2, replicas, device_bytes)  # mirrored 282688 bytes


def test_the_edges_of_the_headroom():
    mirrored = 282688
    edge = int(mirrored / MEMORY_HEADROOM)  # just under: the budget is a hair below the state
    assert memory_finding(_fit(edge + 1)) is None
    warn = memory_finding(_fit(edge - 1))
    assert warn.severity == "warning" and "over 90% of one device's" in warn.message
    assert memory_finding(_fit(mirrored)).severity == "warning"  # fits the device, not with activations
    err = memory_finding(_fit(mirrored - 1))
    assert err.severity == "error" and "more than one device's" in err.message


def test_the_finding_names_the_figures_and_the_fix():
    f = memory_finding(_fit(200_000))
    assert f.id == "needs-sharding" and f.replica is None
    assert "17,668 parameters (69.02 KiB)" in f.message and "need 276.06 KiB per replica" in f.message
    assert "Sharded across the 2 replicas it is 138.03 KiB each, which fits" in f.message
    assert f.fix.startswith("allgpu.FullyShardedStrategy() in place of MirroredStrategy")
    assert f.evidence == ("parameters: 17668 elements, 70672 bytes (70672 trainable)",
                          "per replica under MirroredStrategy: 282688 bytes",
                          "per replica fully sharded across 2: 141344 bytes", "device memory: 200000 bytes")
    # Too large even sharded: the devices needed, or CPU offload.
    f = memory_finding(_fit(100_000))
    assert "still too much" in f.message and "on at least 4 devices" in f.fix and "offload_to_cpu=True" in f.fix
    assert "torch.device('meta')" not in f.fix  # the parameters alone (70672 bytes) fit
    huge = memory_finding(MemoryFit(10 ** 9, 4 * 10 ** 9, 4 * 10 ** 9, "AdamW", 2, 8, 3 * 2 ** 30))
    assert "with strategy.scope(), torch.device('meta'):" in huge.fix and "across the 8 replicas" in huge.fix
    f = memory_finding(_fit(200_000, replicas=1))
    assert "would need at least 2 devices" in f.message
    assert human_bytes(1536) == "1.50 KiB" and human_bytes(80 * 2 ** 30) == "80.00 GiB" and human_bytes(12) == "12 B"


def test_measure_counts_tied_frozen_and_dtype():
    emb = torch.nn.Embedding(100, 8)
    head = torch.nn.Linear(8, 100, bias=False)
    head.weight = emb.weight  # tied: counted once
    frozen = torch.nn.Linear(8, 8).to(torch.bfloat16).requires_grad_(False)
    model = torch.nn.ModuleList([emb, head, frozen])
    fit = measure(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), replicas=3)
    assert fit.params == 800 + 72 and fit.param_bytes == 800 * 4 + 72 * 2 and fit.trainable_bytes == 800 * 4
    assert fit.slots == 1 and fit.optimizer == "SGD" and fit.mirrored_bytes == 800 * 4 * 3 + 72 * 2


def fig(replica, memory):
    return ReplicaFigures(replica, "node-a", "cuda:0", memory=memory)


def test_the_monitor_rule_takes_the_tightest_device_and_reports_once():
    roomy, tight = _fit(10 ** 6).to_dict(), _fit(200_000).to_dict()
    findings = diagnose([fig(0, roomy), fig(1, tight)])
    assert [(f.id, f.severity) for f in findings] == [("needs-sharding", "error")]
    assert "device memory: 200000 bytes" in findings[0].evidence
    assert diagnose([fig(0, roomy), fig(1, roomy)]) == [] and diagnose([fig(0, None)]) == []
    again = ReplicaFigures.from_dict(fig(0, tight).to_dict())  # through the gather's dict and back
    assert again.memory == tight


class _Strategy:
    """What StepMonitor reads of a strategy, for a monitor that never gathers."""

    def __init__(self, cls_name="MirroredStrategy", **attrs):
        self.device, self.num_replicas_in_sync, self.replica_id_in_sync = torch.device("cpu"), 2, 0
        self.__class__ = type(cls_name, (_Strategy,), {})
        self.__dict__.update(attrs)


def test_the_reading_edge_and_the_strategies_it_applies_to(monkeypatch):
    model = torch.nn.Linear(64, 64)
    adam = torch.optim.Adam(model.parameters())
    plain = StepMonitor(_Strategy(), sample_gpu=False, model=model, optimizer=adam)
    assert plain._memory_fit() is None  # a CPU device: no limit to plan against
    monkeypatch.setattr(memory_advice, "device_capacity", lambda device: (5000, "a fake reading"))
    read = plain._memory_fit()
    assert read["device_bytes"] == 5000 and read["capacity_source"] == "a fake reading"
    assert read["mirrored_bytes"] == 4160 * 4 * 4 and read["replicas"] == 2 and read["strategy"] == "MirroredStrategy"
    given = StepMonitor(_Strategy(), sample_gpu=False, model=model, optimizer=adam, device_memory=10 ** 9)
    assert given._memory_fit()["device_bytes"] == 10 ** 9  # an explicit size wins over the reading
    sharded = StepMonitor(_Strategy("FullyShardedStrategy", forward_is_collective=True), sample_gpu=False,
                          model=model, optimizer=adam)
    assert sharded._memory_fit()["strategy"] == "FullyShardedStrategy"  # its share is judged, across its replicas
    offloaded = StepMonitor(_Strategy("FullyShardedStrategy", forward_is_collective=True, offload_to_cpu=True),
                            sample_gpu=False, model=model, optimizer=adam)
    assert offloaded._memory_fit() is None  # the state lives in host memory
    central = StepMonitor(_Strategy("CentralStorageStrategy", central_device=torch.device("meta")), sample_gpu=False,
                          model=model, optimizer=adam)
    assert central._memory_fit()["slots"] == 0  # optimizer state lives on the central device, not the replica's
    servers = StepMonitor(_Strategy("ParameterServerStrategy", server_stats=lambda ps=0: {}), sample_gpu=False,
                          model=model, optimizer=adam)
    assert servers._memory_fit()["slots"] == 0  # optimizer state on the parameter servers
    assert StepMonitor(_Strategy(), sample_gpu=False)._memory_fit() is None  # no model given
    with pytest.raises(ArgumentError, match="device_memory"):
        StepMonitor(_Strategy(), device_memory=-1)


def test_under_full_sharding_the_share_is_judged():
    fit = MemoryFit(17668, 70672, 70672, "Adam", 2, 2, 200_000, "FullyShardedStrategy")  # 141344 bytes a replica
    assert memory_finding(fit) is None  # the share fits 90% of 200000
    f = memory_finding(MemoryFit(17668, 70672, 70672, "Adam", 2, 2, 140_000, "FullyShardedStrategy"))
    assert f.severity == "error" and "FullyShardedStrategy holds 1/2" in f.message and "138.03 KiB" in f.message
    assert "on at least 3 devices" in f.fix and "offload_to_cpu=True" in f.fix
    assert memory_finding(MemoryFit(17668, 70672, 70672, "Adam", 2, 2, 150_000, "FullyShardedStrategy")).severity \
        == "warning"  # 141344 fits 150000, not 90% of it
