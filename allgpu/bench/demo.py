"""The main job: a small CNN on scikit-learn's bundled handwritten digits, on every device there is.

The data are real: 1,797 8x8 grey-scale images of the digits 0-9 (UCI ML hand-written digits, shipped inside
scikit-learn, read from disk, never downloaded). 80% train, 20% test, stratified with a fixed seed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset


def digits_datasets(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """Train and test sets of ``(image (1, 8, 8) float32 in [0, 1], label int64)``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    train_idx, test_idx = train_test_split(range(len(labels)), test_size=0.2, random_state=seed,
                                           stratify=digits.target)
    return (TensorDataset(images[train_idx], labels[train_idx]), TensorDataset(images[test_idx], labels[test_idx]))


def digits_cnn() -> nn.Module:
    """A small CNN for (N, 1, 8, 8) inputs, 10 classes; ~0.15M parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10),
    )


@dataclass
class DemoResult:
    replicas: int
    device: str
    epochs: int
    global_batch_size: int
    test_accuracy: float
    test_loss: float
    samples_per_second: float
    per_replica_samples_per_second: float
    train_seconds: float
    checkpoint: str | None
    fallback_reason: str | None
    diagnosis: list


def run_demo(*, replicas: int | None = None, epochs: int = 12, global_batch_size: int | None = None, lr: float = 2e-3,
             checkpoint_dir: str | None = "allgpu_checkpoints/demo", verbose: bool = True,
             monitor: bool = True, report_dir: str | None = None) -> DemoResult:
    """Train the digits CNN with MirroredStrategy over every visible GPU (2 CPU replicas without one).

    Returns the result on every replica (identical metrics); replica 0 also writes the checkpoint and, with
    ``monitor``, prints the per-replica step table and diagnosis (and writes them to ``report_dir``).
    """
    import allgpu
    from allgpu.train import evaluate, fit

    if replicas is None and not any(d.is_cuda for d in allgpu.visible_devices()):
        replicas = 2
    strategy = allgpu.MirroredStrategy(num_replicas=replicas)
    if global_batch_size is None:  # 64, rounded up to a multiple of the replicas so every replica gets as many
        n = strategy.num_replicas_in_sync
        global_batch_size = -(-64 // n) * n
    train, test = digits_datasets()
    torch.manual_seed(0)
    with strategy.scope():
        model = digits_cnn()
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    history = fit(model, optimizer, loss_fn, train, epochs=epochs, global_batch_size=global_batch_size,
                  strategy=strategy, verbose=verbose, monitor=monitor, report_dir=report_dir,
                  checkpoint_dir=checkpoint_dir, resume=False)
    train_seconds = time.perf_counter() - start
    result = evaluate(model, loss_fn, test, global_batch_size=global_batch_size, strategy=strategy)
    path = _latest(checkpoint_dir)
    throughput = history.history["samples_per_second"][-1]
    return DemoResult(
        replicas=strategy.num_replicas_in_sync, device=str(strategy.device), epochs=epochs,
        global_batch_size=global_batch_size, test_accuracy=result["accuracy"], test_loss=result["loss"],
        samples_per_second=throughput, per_replica_samples_per_second=throughput / strategy.num_replicas_in_sync,
        train_seconds=train_seconds, checkpoint=path, fallback_reason=strategy.fallback_reason,
        diagnosis=[f.id for r in history.monitor_reports[-1:] for f in r.diagnosis],
    )


def _latest(checkpoint_dir) -> str | None:
    if not checkpoint_dir:
        return None
    from allgpu.checkpoint import latest_checkpoint

    path = latest_checkpoint(checkpoint_dir)
    return str(path) if path is not None else None


def report_paths(report: str) -> tuple[Path, Path]:
    """``--report PATH``: a ``.json`` file for the summary, the monitor's files beside it; else a folder."""
    path = Path(report)
    if path.suffix == ".json":
        return path, path.parent
    return path / "summary.json", path


def write_report(result: DemoResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")  # whole or not at all
    tmp.write_text(json.dumps(result.__dict__, indent=2) + "\n")
    os.replace(tmp, path)
