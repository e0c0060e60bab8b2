"""Keras model.fit on allgpu replicas against one-replica Keras fit and the keras-io guide's hand-written DDP.

    python benchmarks/keras_overhead.py                     # 2 CPU replicas on Gloo, 3 rounds
    python benchmarks/keras_overhead.py --replicas 2 --rounds 5 --epochs 4

The same Keras model (the digits CNN of examples/keras_digits.py, 19k parameters), the same data (scikit-learn's
digits, tiled to 3,594 images), the same global batch and Adam:

- ``keras``:   plain ``model.fit`` in one process with all CPU threads, no allgpu (what a user runs today);
- ``keras-1t``: the same with one thread, the share of the machine each of 2 replicas gets on a 2-core machine;
- ``allgpu``:  ``model.fit`` of the model built in ``MirroredStrategy(num_replicas=N).scope()``;
- ``ddp``:     the keras-io guide "Multi-GPU distributed training with PyTorch": the Keras model wrapped in
  ``torch.nn.parallel.DistributedDataParallel``, a ``DistributedSampler`` DataLoader, ``torch.optim.Adam``,
  ``CrossEntropyLoss`` and a hand-written loop, N processes started by ``torch.multiprocessing``.

The variants alternate round by round; each reports examples/s over the epochs after the first (medians over
rounds). Prints the ratios allgpu/keras and allgpu/ddp (the cost of Keras's fit loop plus allgpu's sync against
the guide's bare loop).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import allgpu  # noqa: E402


def data(tiles: int = 2):
    digits = load_digits()
    x = np.tile((digits.images / 16.0).astype("float32")[..., None], (tiles, 1, 1, 1))
    return x, np.tile(digits.target.astype("int64"), tiles)


def model():
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


class EpochTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(time.perf_counter() - self._start)


def _compile(m):
    m.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def keras_fit(batch: int, epochs: int) -> float:
    """Plain Keras, one process. Returns examples/s over epochs 2.."""
    keras.utils.set_random_seed(0)
    x, y = data()
    m = model()
    _compile(m)
    times = EpochTimes()
    m.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, callbacks=[times])
    return len(x) * (epochs - 1) / sum(times.times[1:])


def allgpu_fit(batch: int, epochs: int) -> float:
    strategy = allgpu.MirroredStrategy()
    keras.utils.set_random_seed(0)
    x, y = data()
    with strategy.scope():
        m = model()
        _compile(m)
    times = EpochTimes()
    m.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, callbacks=[times])
    return float(strategy.reduce("max", len(x) * (epochs - 1) / sum(times.times[1:])))  # the slowest replica's


def _ddp_replica(rank, world, port, batch, epochs, results):
    # As the keras-io guide does it, on Gloo/CPU (the guide uses NCCL and .cuda()).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=world, rank=rank)
    keras.utils.set_random_seed(0)
    x, y = data()
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=batch // world)
    m = model()
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    optimizer = torch.optim.Adam(m.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for _ in range(epochs):
        start, running = time.perf_counter(), 0.0
        for inputs, targets in loader:
            loss = loss_fn(ddp(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
        times.append(time.perf_counter() - start)
    rate = torch.tensor(len(x) * (epochs - 1) / sum(times[1:]))
    dist.all_reduce(rate, op=dist.ReduceOp.MIN)
    if rank == 0:
        results.put(float(rate))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ddp_fit(batch: int, epochs: int, world: int) -> float:
    ctx = mp.get_context("fork")
    results = ctx.SimpleQueue()
    mp.start_processes(_ddp_replica, args=(world, free_port(), batch, epochs, results), nprocs=world,
                       join=True, start_method="fork")
    return results.get()


def _single(batch, epochs, threads):
    torch.set_num_threads(threads)
    return keras_fit(batch, epochs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="per measurement; the first is warm-up")
    parser.add_argument("--batch-size", type=int, default=128, help="global batch")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"keras": [], "keras-1t": [], "allgpu": [], "ddp": []}
    cores = os.cpu_count() or 1
    for r in range(args.rounds):
        for name, threads in (("keras", cores), ("keras-1t", 1)):
            rates[name].append(allgpu.launch(_single, num_replicas=1, args=(args.batch_size, args.epochs, threads),
                                             start_method="spawn")[0])
        rates["allgpu"].append(allgpu.launch(allgpu_fit, num_replicas=args.replicas,
                                             args=(args.batch_size, args.epochs), start_method="spawn")[0])
        rates["ddp"].append(ddp_fit(args.batch_size, args.epochs, args.replicas))
        print(f"round {r + 1}: " + "  ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items()), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\nexamples/s (median of {args.rounds} rounds, global batch {args.batch_size}, {os.cpu_count()} CPU cores)")
    print(f"  Keras fit, 1 process, {cores} threads    {med['keras']:>10,.0f}")
    print(f"  Keras fit, 1 process, 1 thread     {med['keras-1t']:>10,.0f}")
    print(f"  allgpu Keras fit, {args.replicas} replicas       {med['allgpu']:>10,.0f}")
    print(f"  keras-io guide DDP, {args.replicas} replicas     {med['ddp']:>10,.0f}")
    print(f"  allgpu / Keras fit                 {med['allgpu'] / med['keras']:>10.2f}")
    print(f"  allgpu / Keras fit (1 thread)      {med['allgpu'] / med['keras-1t']:>10.2f}")
    print(f"  allgpu / guide DDP                 {med['allgpu'] / med['ddp']:>10.2f}")


if __name__ == "__main__":
    main()
