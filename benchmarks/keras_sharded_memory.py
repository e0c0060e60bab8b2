"""Bytes a replica holds for a Keras model under MirroredStrategy and FullyShardedStrategy, side by side.

    python benchmarks/keras_sharded_memory.py                    # 2 and 4 CPU replicas on Gloo
    python benchmarks/keras_sharded_memory.py --replicas 2 --width 2048

The same Keras 3 (PyTorch backend) MLP (784 -> width -> width -> width -> 10, 2.9M parameters at width 1024) with
Adam, trained by ``model.fit`` for 2 epochs of random data at global batch 64, built in ``strategy.scope()``.
After training, each replica counts what it holds between steps: the trainable variables, their gradients and
the optimizer's variables (Adam's two moments, its step count and learning rate), from the tensors themselves
(a ``DTensor`` counts its local shard). Also prints examples/s of the second epoch (a noisy figure on a shared
CPU machine; the memory figures are exact).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402

import allgpu  # noqa: E402

GLOBAL_BATCH, EXAMPLES = 64, 1024


def _local_bytes(tensor) -> int:
    from torch.distributed.tensor import DTensor

    if tensor is None:
        return 0
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


class _Timer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start


def _run(kind: str, width: int) -> dict:
    strategy = allgpu.FullyShardedStrategy() if kind == "fully_sharded" else allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(EXAMPLES, 784)).astype("float32")
    y = rng.integers(0, 10, size=EXAMPLES)
    with strategy.scope():
        model = keras.Sequential([keras.Input((784,))] + [keras.layers.Dense(width, activation="relu")
                                                           for _ in range(3)] + [keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = _Timer()
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, verbose=0, callbacks=[timer])
    params = sum(_local_bytes(v.value) for v in model.trainable_variables)
    grads = sum(_local_bytes(v.value.grad) for v in model.trainable_variables)
    optimizer = sum(_local_bytes(v.value) for v in model.optimizer.variables)
    return {"params": params, "grads": grads, "optimizer": optimizer, "examples_s": EXAMPLES / timer.seconds,
            "count": model.count_params()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    mib = 1024 * 1024
    print(f"{'strategy':<16}{'replicas':>9}{'params MiB':>12}{'grads MiB':>11}{'Adam MiB':>10}{'total MiB':>11}"
          f"{'examples/s':>12}")
    for n in args.replicas:
        rows = {}
        for kind in ("mirrored", "fully_sharded"):
            results = allgpu.launch(_run, num_replicas=n, args=(kind, args.width))
            worst = max(results, key=lambda r: r["params"] + r["grads"] + r["optimizer"])
            rows[kind] = worst
            total = worst["params"] + worst["grads"] + worst["optimizer"]
            print(f"{kind:<16}{n:>9}{worst['params'] / mib:>12.2f}{worst['grads'] / mib:>11.2f}"
                  f"{worst['optimizer'] / mib:>10.2f}{total / mib:>11.2f}{worst['examples_s']:>12.0f}")
        held = {k: r["params"] + r["grads"] + r["optimizer"] for k, r in rows.items()}
        print(f"  {rows['mirrored']['count']:,} parameters; fully_sharded / mirrored bytes per replica: "
              f"{held['fully_sharded'] / held['mirrored']:.3f} (1/{n} = {1 / n:.3f}); examples/s ratio "
              f"{rows['fully_sharded']['examples_s'] / rows['mirrored']['examples_s']:.2f}")


if __name__ == "__main__":
    main()
