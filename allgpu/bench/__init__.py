"""``allgpu bench``: measured side by side, never timed tests.

- :mod:`~allgpu.bench.throughput`: allgpu against hand-written DDP on the same model (the default command), and
  strong/weak scaling;
- :mod:`~allgpu.bench.memory`: ``--memory``, what one replica holds under each strategy;
- :mod:`~allgpu.bench.predict`: ``--predict``, throughput and efficiency at N = 1..1024 devices on named
  interconnects from one measured device.

The throughput names are re-exported here, where they lived before the package split (``allgpu.bench.compare``).
"""

from allgpu.bench.throughput import (KINDS, MODELS, Comparison, compare, format_comparisons, loopback_interconnect,
                                     mlp_1m, profile_model, scaling, weak_scaling)

__all__ = ["KINDS", "MODELS", "Comparison", "compare", "format_comparisons", "loopback_interconnect", "mlp_1m",
           "profile_model", "scaling", "weak_scaling"]
