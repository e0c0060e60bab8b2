#!/usr/bin/env bash
# The CUDA/NCCL checks and GPU figures, in one go, on a machine with a GPU and PyTorch (no install needed:
# the package runs from the checkout). Results go to $OUT (default ./gpu_out).
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
py=python3
step() { echo; echo "=== $*"; }
step versions; $py -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0), 'nccl', torch.cuda.nccl.version())"
$py -c "import rich, sklearn, matplotlib, pynvml; print('deps ok')"
step doctor; $py -m allgpu.cli.main doctor; $py -m allgpu.cli.main doctor --json > "$OUT/doctor.json"
step "demo on every visible GPU"; (cd /tmp && $py -m allgpu.cli.main demo --quiet --report "$OLDPWD/$OUT/demo")
step "fit with bf16 and fp16 on CUDA"; $py - <<'PY'
import torch, allgpu
from allgpu.bench.demo import digits_cnn, digits_datasets
train, test = digits_datasets()
for precision in ("bf16", "fp16"):
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = digits_cnn(); opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    h = allgpu.fit(model, opt, torch.nn.CrossEntropyLoss(), train, epochs=8, global_batch_size=64, strategy=strategy,
                   mixed_precision=precision, verbose=False)
    r = allgpu.evaluate(model, torch.nn.CrossEntropyLoss(), test, global_batch_size=64, strategy=strategy)
    print(precision, strategy.device, "test accuracy", round(r["accuracy"], 4))
PY
step "allgpu run --nproc-per-node auto (NCCL)"; $py -m allgpu.cli.main run --nproc-per-node auto tests/gpu_run_script.py
step "allgpu vs DDP on CUDA (NCCL, 1 replica)"; $py benchmarks/mirrored_vs_ddp.py --device cuda --replicas 1 --steps 300 --json "$OUT/bench_cuda.json"
step "gpu tests"; $py -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -5
step "monitor overhead"; $py benchmarks/monitor_overhead.py --device cuda
step "checkpoint pause"; $py benchmarks/checkpoint_pause.py --device cuda --params 50e6 --repeats 3
