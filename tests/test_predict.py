"""The scaling prediction: the cost model's arithmetic, overlap, accumulation, and the CLI as a user runs it."""

import math

import pytest

from allgpu.bench.predict import (INTERCONNECTS, Interconnect, StepProfile, accumulation_for, allreduce_seconds,
                            efficiency, step_seconds, uniform_profile)

FLAT = Interconnect("test", 1, 0.0, 0.0, 1e9, 1e-5)  # 1 GB/s, 10 us per hop, one device per node


def test_ring_all_reduce_cost_is_latency_plus_two_n_minus_one_over_n_bytes_over_bandwidth():
    nbytes = 100e6
    for n in (2, 4, 16):
        ring = 2 * (n - 1) * 1e-5 + 2 * (n - 1) / n * nbytes / 1e9
        tree = 2 * math.ceil(math.log2(n)) * 1e-5 + 2 * (n - 1) / n * nbytes / 1e9
        assert allreduce_seconds(nbytes, n, FLAT) == pytest.approx(min(ring, tree))
    assert allreduce_seconds(nbytes, 1, FLAT) == 0.0


def test_above_one_node_the_network_term_appears():
    ic = Interconnect("2-level", 8, 100e9, 1e-6, 10e9, 1e-5)
    inside = allreduce_seconds(1e8, 8, ic)
    across = allreduce_seconds(1e8, 16, ic)
    assert across > inside + 2 * (2 - 1) / 2 * 1e8 / 10e9 * 0.99


def test_overlap_hides_communication_that_fits_in_the_rest_of_backward():
    # Two 1 MB buckets; the first ready at the very start of a 100 ms backward: its ~1 ms all-reduce is hidden.
    early = StepProfile(0.05, 0.1, 0.01, [1e6, 1e6], [0.0, 0.1], 32)
    late = StepProfile(0.05, 0.1, 0.01, [1e6, 1e6], [0.1, 0.1], 32)
    comm = allreduce_seconds(1e6, 8, FLAT)
    assert step_seconds(early, 8, FLAT) == pytest.approx(0.16 + comm)
    assert step_seconds(late, 8, FLAT) == pytest.approx(0.16 + 2 * comm)
    assert efficiency(early, 1, FLAT) == 1.0


def test_accumulation_for_ninety_percent_grows_as_bandwidth_falls():
    profile = uniform_profile(0.02, 400e6, 32)  # 20 ms step, 400 MB of gradients: communication-bound
    fast, slow = INTERCONNECTS[4], INTERCONNECTS[-1]
    assert efficiency(profile, 64, slow) < efficiency(profile, 64, fast) < 1.0
    k_fast, k_slow = accumulation_for(profile, 64, fast), accumulation_for(profile, 64, slow)
    assert k_fast is not None and k_slow is not None and k_slow > k_fast
    assert efficiency(profile, 64, slow, k_slow) >= 0.9 > efficiency(profile, 64, slow, k_slow // 2)


@pytest.mark.replicas
@pytest.mark.timeout(300)
def test_bench_predict_prints_a_table_and_writes_a_plot(tmp_path):
    from tests.harness import run_cli

    result = run_cli("bench", "--predict", "--model", "digits_cnn", "--plot", str(tmp_path / "p.png"),
                     timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "scaling efficiency" in result.stdout and "1/node, Ethernet 10 GbE" in result.stdout
    assert "for >= 90% efficiency" in result.stdout
    assert (tmp_path / "p.png").stat().st_size > 10_000
