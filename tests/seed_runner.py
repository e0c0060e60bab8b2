"""Runs migrated seed examples one after another in this replica (``allgpu run --cpu-replicas N seed_runner.py
MANIFEST OUT``), as tests/test_seeds.py asks; one process per replica for all examples saves the start-up.

Each example runs as ``__main__`` in its own folder under OUT, after the same seeds on every replica, with the
names the seed documents leave to the reader ("data loading as in Example 1") given as digits. For each example
and replica, OUT/NAME.RANK.json says how it ended (the error's type, message and line in the example) and the
held-out digits accuracy where the model classifies 784 pixels; OUT/NAME.RANK.npz holds the model's weights.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import seed_digits  # noqa: E402


def _given() -> dict:
    """What the documents leave to the reader: MNIST-shaped digits, flattened and one-hot, and a short loop."""
    (x, y), _ = seed_digits.load_data()
    x = x.reshape(-1, 784).astype("float32") / 255
    y = keras.utils.to_categorical(y, num_classes=10)
    batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, len(x), 32)]
    return {"x_train": x, "y_train": y, "epochs": 1, "dataset": batches, "seed_digits": seed_digits}


def _seed() -> None:
    np.random.seed(0)
    keras.utils.set_random_seed(0)
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(0)


def _accuracy(model) -> float | None:
    for features in (784, 64):  # MNIST-shaped digits (the seeds), 8x8 digits (tests/migrate_cases)
        x, y = seed_digits.held_out(features)
        try:
            out = keras.ops.convert_to_numpy(model(x, training=False))
        except Exception:  # another input size, or not a classifier (the seeds' regression examples)
            continue
        if out.shape == (len(y), 10):
            return float((out.argmax(axis=1) == y).mean())
    return None


def _error_line(exc: BaseException, path: str) -> int | None:
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return lines[-1] if lines else None


def run_one(name: str, path: str, out: Path, rank: int) -> None:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
    environ = dict(os.environ)
    _seed()
    result: dict = {"name": name, "rank": rank}
    try:
        ns = runpy.run_path(path, init_globals=_given(), run_name="__main__")
    except BaseException as exc:  # noqa: BLE001 - the test reads how it ended
        result.update(error=type(exc).__name__, message=str(exc), line=_error_line(exc, path))
        ns = {}
    finally:
        os.environ.clear()
        os.environ.update(environ)
    strategy, model = ns.get("strategy"), ns.get("model")
    if strategy is not None:
        result["replicas"] = strategy.num_replicas_in_sync
    if model is not None:
        np.savez(out / f"{name}.{rank}.npz", *model.get_weights())
        result["accuracy"] = _accuracy(model)
    (out / f"{name}.{rank}.json").write_text(json.dumps(result))


def main() -> None:
    manifest, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    rank = int(os.environ.get("RANK", "0"))
    for name, path in manifest:
        run_one(name, path, out, rank)
        print(f"done {name} on replica {rank}", flush=True)


if __name__ == "__main__":
    main()
