"""allgpu's scaling prediction against published multi-GPU measurements, side by side.

    python benchmarks/predict_vs_published.py

For each entry of benchmarks/published_scaling.json the one-GPU step is taken from the published one-GPU
throughput (batch / img/s) with backward = 2/3 of it and gradient buckets ready evenly through backward (no
per-layer timing is published), and the prediction for the published GPU count on the named interconnect is
printed next to the published scaling efficiency.
"""

import json
from pathlib import Path

from allgpu.bench.predict import INTERCONNECTS, allreduce_seconds, efficiency, uniform_profile

DATA = Path(__file__).with_name("published_scaling.json")


def main() -> None:
    entries = json.loads(DATA.read_text())["entries"]
    by_name = {ic.name: ic for ic in INTERCONNECTS}
    print(f"{'model':<15} {'precision':<6} {'platform':<34} {'GPUs':>4} {'published':>9} {'predicted':>9} "
          f"{'comm ms':>8} {'step ms':>8}")
    for e in entries:
        ic = by_name[e["interconnect"]]
        step = e["batch_per_gpu"] / e["one_gpu_img_s"]
        profile = uniform_profile(step, e["gradient_bytes"], e["batch_per_gpu"])
        published = e["n_gpu_img_s"] / (e["gpus"] * e["one_gpu_img_s"])
        comm = allreduce_seconds(e["gradient_bytes"], e["gpus"], ic)
        print(f"{e['model']:<15} {e['precision']:<6} {e['platform']:<34} {e['gpus']:>4} {published:>9.3f} "
              f"{efficiency(profile, e['gpus'], ic):>9.3f} {comm * 1e3:>8.2f} {step * 1e3:>8.1f}")


if __name__ == "__main__":
    main()
