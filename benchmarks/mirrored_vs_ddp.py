"""allgpu MirroredStrategy against hand-written DistributedDataParallel, side by side in one run.

    python benchmarks/mirrored_vs_ddp.py                 # 2 CPU replicas on Gloo
    python benchmarks/mirrored_vs_ddp.py --device cuda --replicas 1

Prints samples/s of each and the ratio allgpu/DDP for the demo CNN and a 1.07M-parameter MLP (target >= 0.95).
"""

import sys

from allgpu.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
