"""``allgpu.launch(fn, args=...)`` checks that ``fn(*args, **kwargs)`` binds before starting any replica. A stranger
porting pytorch/examples' imagenet swapped ``mp.spawn(main_worker, nprocs=N, args=(ngpus_per_node, args))`` for
``allgpu.launch(main_worker, num_replicas=N, args=(ngpus_per_node, args))``: every replica then raised ``TypeError:
main_worker() missing 1 required positional argument: 'args'`` (mp.spawn passes a process index first, launch none),
with nothing saying why. Now an ``ArgumentTypeError`` says so, in the caller's process, before any replica starts."""

import pytest

import allgpu
from allgpu.errors import ArgumentTypeError


def main_worker(gpu, ngpus_per_node, args):  # mp.spawn's convention: the process index first
    return gpu


def two(a, b):
    return a + b


def test_a_function_written_for_mp_spawn_is_named_up_front(monkeypatch):
    monkeypatch.setattr("torch.multiprocessing.start_processes", lambda *a, **k: pytest.fail("a replica started"))
    with pytest.raises(ArgumentTypeError, match=r"(?s)main_worker\(gpu, ngpus_per_node, args\) takes a process "
                                                r"index first \('gpu'\).*torch.multiprocessing.spawn.*"
                                                r"strategy.replica_id_in_sync"):
        allgpu.launch(main_worker, num_replicas=2, args=(1, {"lr": 0.1}))
    with pytest.raises(ArgumentTypeError, match=r"cannot call two\(a, b\) with args=\(1, 2, 3\).*too many"):
        allgpu.launch(two, num_replicas=2, args=(1, 2, 3))
    with pytest.raises(TypeError):  # an ArgumentTypeError is a TypeError, as the call's own error was
        allgpu.launch(two, num_replicas=2, kwargs={"c": 1})
