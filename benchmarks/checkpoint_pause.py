"""How long does a checkpoint stall training? Blocking vs background (``blocking=False``) saves.

Builds an MLP of about ``--params`` parameters (default 50M, i.e. 200 MB of float32 weights plus 400 MB
of Adam state), takes one Adam step so the optimizer state exists, then measures per mode:

* pause: seconds ``save`` blocks the training thread (blocking: the whole write; background: the copy to
  CPU memory, plus waiting for nothing),
* total: seconds until the checkpoint is final on disk,
* step time of training steps run while the background write is in flight, against steps with none.

Run: ``.venv/bin/python benchmarks/checkpoint_pause.py [--params 50e6] [--device cpu|cuda] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from torch import nn

from allgpu import checkpoint


def build(params: float, device: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    width = 2048
    layers = max(1, round(params / (width * width + width)))
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    step(model, optimizer, device)
    return model, optimizer


def step(model: nn.Module, optimizer: torch.optim.Optimizer, device: str) -> float:
    started = time.perf_counter()
    optimizer.zero_grad()
    model(torch.randn(16, 2048, device=device)).pow(2).mean().backward()
    optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def measure(directory: Path, model, optimizer, device: str, *, sharded: bool, blocking: bool, repeats: int) -> dict:
    pauses, totals, busy_steps = [], [], []
    for i in range(repeats):
        started = time.perf_counter()
        out = checkpoint.save(
            directory, model=model, optimizer=optimizer, step=i, sharded=sharded, blocking=blocking, keep=2
        )
        pauses.append(time.perf_counter() - started)
        if not blocking:
            while not out.done():  # train while the write is in flight, as a real loop would
                busy_steps.append(step(model, optimizer, device))
            out.wait()
        totals.append(time.perf_counter() - started)
    entry = checkpoint.latest_checkpoint(directory)
    size = sum(p.stat().st_size for p in entry.rglob("*")) if entry.is_dir() else entry.stat().st_size
    return {
        "mode": f"{'sharded' if sharded else 'single file'}, {'blocking' if blocking else 'background'}",
        "pause_ms": 1e3 * statistics.median(pauses),
        "pause_ms_each": [round(1e3 * p, 1) for p in pauses],
        "total_ms": 1e3 * statistics.median(totals),
        "size_mb": size / 2**20,
        "steps_during_write": len(busy_steps),
        "step_ms_during_write": 1e3 * statistics.median(busy_steps) if busy_steps else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=50e6, help="approximate parameter count (default 50e6)")
    parser.add_argument("--device", default="cpu", help="where the model lives: cpu or cuda (default cpu)")
    parser.add_argument("--repeats", type=int, default=3, help="saves per mode; the median is reported")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp directory)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, optimizer = build(args.params, args.device)
    n_params = sum(p.numel() for p in model.parameters())
    idle_steps = [step(model, optimizer, args.device) for _ in range(5)]
    root = Path(tempfile.mkdtemp(prefix="allgpu-ckpt-bench-", dir=args.dir))
    rows = []
    try:
        for sharded in (False, True):
            for blocking in (True, False):
                sub = root / f"{int(sharded)}{int(blocking)}"
                rows.append(
                    measure(
                        sub, model, optimizer, args.device, sharded=sharded, blocking=blocking, repeats=args.repeats
                    )
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "params": n_params,
        "device": args.device,
        "threads": torch.get_num_threads(),
        "step_ms_idle": 1e3 * statistics.median(idle_steps),
        "modes": rows,
    }
    table = Table(title=f"checkpoint pause: {n_params / 1e6:.1f}M parameters + Adam on {args.device}")
    for column in ("mode", "pause ms", "until final ms", "size MB", "train step ms during write"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for row in rows:
        during = "-"
        if row["step_ms_during_write"] is not None:
            during = f"{row['step_ms_during_write']:.0f} ({row['steps_during_write']} steps)"
        table.add_row(row["mode"], f"{row['pause_ms']:.0f}", f"{row['total_ms']:.0f}", f"{row['size_mb']:.0f}", during)
    console = Console()
    console.print(table)
    console.print(f"train step with no write in flight: {result['step_ms_idle']:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
