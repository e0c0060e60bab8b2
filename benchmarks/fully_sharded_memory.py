"""Bytes per replica under OneDevice, Mirrored and FullySharded (2 and 4 replicas), side by side in one run.

    python benchmarks/fully_sharded_memory.py                  # CPU replicas on Gloo
    python benchmarks/fully_sharded_memory.py --device cuda    # adds torch.cuda.max_memory_allocated

Same as ``allgpu bench --memory``: parameters, gradients and optimizer state held by one replica for an
8.4M-parameter model with Adam, and the FullySharded / Mirrored throughput ratio (see allgpu/bench_memory.py).
"""

import sys

from allgpu.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--memory", *sys.argv[1:]]))
