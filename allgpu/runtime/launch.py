"""``allgpu.launch(fn)``: one process per replica for a function, for notebooks and tests.

Follows Accelerate's ``notebook_launcher`` and ``torch.multiprocessing.start_processes``; each process gets
torchrun's variables and the :mod:`allgpu.runtime.env` contract, so a strategy created in ``fn`` joins the job.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import pickle
import shutil
import socket
import sys
import tempfile
import uuid
from typing import Any, Callable, Sequence

from allgpu.devices import resolve_replica_devices
from allgpu.errors import ArgumentTypeError, ReplicaFailedError, StrategyStartError
from allgpu.runtime import env as launch_env
from allgpu.runtime import job_identity
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines import discover, launcher
from allgpu.runtime.script_command import die_with_parent
from allgpu.runtime.threads import threads_per_replica


def _replica_main(rank, fn, devices, port, job_id, error_dir, timeout_s, args, kwargs, results, forked):
    import torch

    die_with_parent()  # a kernel restarted or killed (SIGKILL runs no finally) leaves no replica training on
    os.environ.update(launch_env.replica_variables(rank, [str(d) for d in devices], port, error_dir, timeout_s,
                                                   launcher_store=True, job_id=job_id))
    if forked:
        # OpenMP is not fork-safe: a forked child's first parallel region can hang. One intra-op thread, as
        # DataLoader workers use, avoids it; start_method="spawn" gives each replica its own pool.
        torch.set_num_threads(1)
    elif not devices[rank].is_cuda:
        torch.set_num_threads(threads_per_replica(len(devices)))
    if forked:
        _whole_lines_to_the_kernel()
    builtins.input = _no_input
    try:
        value = fn(*args, **kwargs)
    except KeyboardInterrupt:  # torch's wrapper would end this replica with code 0 and no result: say why
        results.put((rank, _INTERRUPTED))
        raise
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    _meet_at_end()
    # Plain pickle: torch's queue reduction shares memory by file descriptor, gone once the replica exits.
    results.put((rank, _pickled(value, fn)))


def _pickled(value, fn) -> bytes:
    """``fn``'s return value for the caller; one pickle cannot copy (a lambda, a generator, an open file) is said to
    be that, not a failure of the replica's training ("replica 0 raised ... Can't pickle local object")."""
    try:
        return pickle.dumps(value)
    except Exception as exc:  # pickle raises PicklingError, TypeError or AttributeError
        from allgpu.errors import UnsupportedError

        raise UnsupportedError(
            f"{getattr(fn, '__qualname__', fn)} returned a {type(value).__name__} that cannot be sent back to the caller "
            f"of allgpu.launch ({exc}); its training ran to the end. Fix: return what pickle can copy (tensors, numbers, "
            "model.state_dict()), or save the rest to a file in the function.") from exc


class _WholeLines:
    """A text stream that passes on only whole lines, each in one write (the rest at ``flush``)."""

    def __init__(self, stream):
        self._stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            lines, _, self._pending = self._pending.rpartition("\n")
            self._stream.write(lines + "\n")
            self._stream.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding...: the stream's
        return getattr(self._stream, name)


def _no_input(prompt: object = "") -> str:
    """``input()`` in a replica: its standard input is os.devnull (multiprocessing's), and ipykernel's ``input`` asks
    the notebook through the kernel's sockets, which a forked replica cannot use: it waited for ever."""
    raise EOFError(
        "input() in a replica that allgpu.launch started: a replica has no standard input, and only the kernel's own "
        "process can ask the notebook for one. Fix: read the value before launch and pass it, "
        "allgpu.launch(train, args=(value,)).")


def _whole_lines_to_the_kernel() -> None:
    """A replica forked from a Jupyter kernel writes through the kernel's stream objects, which send every write
    as a message of its own: the replicas' prints reached the notebook cut into words ("replica replica 0 1 of of
    2 2"). Whole lines each in one write keep them apart; a terminal's streams are line-buffered already."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, io.TextIOWrapper) and not isinstance(stream, _WholeLines):
            setattr(sys, name, _WholeLines(stream))


def _meet_at_end() -> None:
    """Replicas leave together: a replica still waiting for replica 0's ``model.save`` to complete (the function's
    last line) failed with "the store is gone" when replica 0 returned first and hosted the store. The launcher
    hosts it now, but replica 0's exit still ends its collectives; a script's replicas meet at exit the same way
    (``allgpu.runtime.replicas``)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _refuse_while_spawning() -> None:
    """A spawned replica imports the main script again (as ``__mp_main__``) to find ``fn``; a ``launch()`` call there
    outside ``if __name__ == "__main__":`` ran again in each replica and died in multiprocessing's bootstrapping
    check, a bare RuntimeError per replica. Say so, naming the guard, before anything starts."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            raise StrategyStartError(
                f"allgpu.launch() ran again while a spawned replica imported the script "
                f"({frame.f_code.co_filename}:{frame.f_lineno}) to find the function: spawn re-imports the main "
                "script in every replica, and this call is not guarded. Fix: put the call under "
                "`if __name__ == \"__main__\":`, or use start_method='fork' (the default while CUDA is not initialised).")
        frame = frame.f_back


def _refuse_inside_a_job() -> None:
    """``srun -n 2 python nb.py`` (or mpirun, torchrun) around ``launch(fn, num_replicas=2)``: each process would
    start a job of its own, two separate trainings. Raise StrategyStartError naming the engine and the fix."""
    job = launcher(os.environ) or discover(tf_config=False)
    if job is None or job.units < 2:
        return
    raise StrategyStartError(
        f"allgpu.launch() runs in process {job.index} of the {job.units} that {job.engine} started "
        f"({', '.join(job.variables)}): each would start a job of its own ({job.units} separate trainings). Fix: call "
        "the function directly, fn(...): each process is a replica and a strategy created in it joins the job; or "
        "start one process (srun -n 1, or plain python) and let launch() start the replicas.")


def launch(
    fn: Callable[..., Any],
    *,
    num_replicas: int | None = None,
    devices: Sequence | None = None,
    args: Sequence = (),
    kwargs: dict | None = None,
    timeout: float | None = None,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in one process per replica, for notebooks and functions.

    Inside ``fn``, ``MirroredStrategy()`` joins the job (as under torchrun). Follows Accelerate's
    ``notebook_launcher`` and ``torch.multiprocessing.start_processes``.

    Args:
        fn: a function; with the ``fork`` start method it may be defined in a notebook.
        num_replicas: number of replicas; default one per visible GPU, else 2 CPU replicas.
        devices: device names instead of ``num_replicas`` (``["/gpu:0", "/gpu:1"]``, ``["/cpu:0", "/cpu:1"]``).
        timeout: collective timeout in seconds for the job's process group, used by strategies created in
            ``fn`` that give none (default 1800).
        start_method: ``"fork"`` (default where CUDA is not yet initialised; each replica then runs one
            intra-op thread, since OpenMP is not fork-safe) or ``"spawn"``.

    Returns:
        ``fn``'s return values, indexed by rank.

    Raises:
        ReplicaFailedError: a replica raised or died; ``.rank`` and ``.remote_traceback`` say which and where.
            The other replicas are stopped at once.
        StrategyStartError: ``spawn`` of a function whose module has no file (read from stdin, ``python -c``), or
            this process is one of several a cluster engine or launcher started (srun, mpirun, torchrun).
        ArgumentTypeError: ``fn`` cannot be called with ``args``/``kwargs`` (checked before any replica starts);
            a function written for ``torch.multiprocessing.spawn`` (a process index first) is named as such.
    """
    import torch
    import torch.multiprocessing as mp

    _refuse_while_spawning()
    _refuse_inside_a_job()
    _check_arguments(fn, tuple(args), dict(kwargs or {}))
    device_list = resolve_replica_devices(num_replicas, devices, cpu_replicas_by_default=2)
    start_method = _check_spawnable(fn, start_method, torch.cuda.is_initialized())
    ctx = mp.get_context(start_method)
    results = ctx.SimpleQueue()
    error_dir = tempfile.mkdtemp(prefix="allgpu-errors-")
    # This process hosts the rendezvous store on a port the OS picks and that stays bound until the replicas are
    # done (torchrun's agent store): no other program or parallel job can take the port between its choice and the
    # replicas' init_process_group, as with a port found free, released and bound again by replica 0.
    listening, job_id = _listening_socket(), f"allgpu job {uuid.uuid4().hex[:12]}"
    from allgpu.runtime.process_group import no_group_to_fork  # imports torch: not at `import allgpu`

    with no_group_to_fork() if start_method == "fork" else contextlib.nullcontext():
        context = mp.start_processes(_replica_main, nprocs=len(device_list), join=False, start_method=start_method,
                                     args=(fn, device_list, listening.getsockname()[1], job_id, error_dir, timeout,
                                           tuple(args), dict(kwargs or {}), results, start_method == "fork"))
    values: list[Any] = [None] * len(device_list)
    store = None
    try:
        store = _job_store(listening, len(device_list), timeout, job_id)
        # Drain results while waiting: a replica blocks writing a result larger than the pipe buffer (64 KiB)
        # until it is read, so joining first would wait forever.
        while not context.join(timeout=0.05):
            _drain(results, values)
    except mp.ProcessRaisedException as exc:
        raise ReplicaFailedError(
            f"replica {exc.error_index} raised; the other replicas were stopped. Its traceback:\n{exc.msg}",
            rank=exc.error_index,
            remote_traceback=exc.msg,
        ) from None
    except mp.ProcessExitedException as exc:
        raise ReplicaFailedError(
            f"replica {exc.error_index} died ({exc.msg.strip()}); the other replicas were stopped.",
            rank=exc.error_index,
        ) from None
    finally:  # interrupted (Ctrl-C, a test timeout): never leave replicas behind
        for process in context.processes:
            if process.is_alive():
                process.kill()
        del store  # the server closes with its last reference: the port is free again
        shutil.rmtree(error_dir, ignore_errors=True)
    _drain(results, values)
    return values


def _listening_socket() -> socket.socket:
    """A socket listening on a loopback port the OS picks: the port is the job's from now on. The store's server
    starts on it only after the replicas are forked (:func:`_job_store`): a fork copies no thread, so a replica
    forked while the server's thread held a lock could wait on it forever (as a copied Gloo group did); the
    replicas' connections wait in the socket's backlog meanwhile."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)
    return listening


def _job_store(listening: socket.socket, replicas: int, timeout: float | None, job_id: str):
    """The job's store, served by this process on ``listening`` (the store owns the socket from now on), holding
    the job's identity for every replica to check at the rendezvous (:mod:`allgpu.runtime.job_identity`)."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    port = listening.getsockname()[1]
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, master_listen_fd=listening.detach(),
                     timeout=timedelta(seconds=launch_env.resolve_timeout(timeout, launch_env.LaunchEnv())))
    spec = ClusterSpec(0, replicas, 0, replicas, "127.0.0.1", port, "allgpu", job_id)
    store.set(job_identity.KEY, job_identity.identity(spec))
    return store


_INTERRUPTED = b"allgpu: replica interrupted"  # posted instead of a result by a replica Ctrl-C ended


def _drain(results, values: list) -> None:
    """Results posted so far into ``values``; KeyboardInterrupt when a replica was interrupted (Ctrl-C reaches every
    replica: ``launch`` then ends as the interrupted function would, not with ``None`` for its result)."""
    while not results.empty():
        rank, value = results.get()
        if value == _INTERRUPTED:
            raise KeyboardInterrupt(f"replica {rank} was interrupted (SIGINT)")
        values[rank] = pickle.loads(value)


def _check_arguments(fn: Callable, args: tuple, kwargs: dict) -> None:
    """``fn(*args, **kwargs)`` must bind, checked before any replica starts (else every replica raises the same
    ``TypeError``). ``torch.multiprocessing.spawn(fn, args=...)`` calls ``fn(i, *args)``: a function written for
    it (pytorch/examples' imagenet ``main_worker(gpu, ngpus_per_node, args)``) is named as such."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: let the call decide
        return
    try:
        signature.bind(*args, **kwargs)
        return
    except TypeError as exc:
        problem = str(exc)
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        signature.bind(0, *args, **kwargs)
    except TypeError:
        raise ArgumentTypeError(f"allgpu.launch cannot call {name}{signature} with args={args!r}, kwargs={kwargs!r}: "
                                f"{problem}. Fix: pass args=/kwargs= that {name} takes.") from None
    first = next(iter(signature.parameters))
    raise ArgumentTypeError(
        f"{name}{signature} takes a process index first ({first!r}), as torch.multiprocessing.spawn passes "
        f"(fn(i, *args)); allgpu.launch calls fn(*args) with no index, so the call would fail in every replica: "
        f"{problem}. Fix: drop {first!r} and read the replica's index from the strategy made in {name} "
        f"(strategy.replica_id_in_sync), or int(os.environ['LOCAL_RANK']) for the device index on this machine.")


def _check_spawnable(fn: Callable, start_method: str | None, cuda_initialised: bool) -> str:
    """The start method (default: spawn once CUDA is initialised, else fork). ``spawn`` re-imports ``fn``'s module
    from its file in every replica, and ``fork`` cannot follow CUDA: say so up front, with the fix that works in
    this process (a notebook that already used the GPU has neither)."""
    start_method = start_method or ("spawn" if cuda_initialised else "fork")
    name = getattr(fn, "__qualname__", fn)
    if start_method == "fork" and cuda_initialised:
        raise StrategyStartError(
            f"allgpu.launch(start_method='fork') cannot start {name!r}: CUDA is already initialised in this process (a "
            "tensor or model was put on a GPU), and a forked replica cannot use it (\"Cannot re-initialize CUDA in "
            "forked subprocess\"). Fix: restart the kernel (or program) and call launch before any GPU work, or leave "
            "start_method out (spawn) with the function in a file you import.")
    if start_method != "spawn":
        return start_method
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if not path or path.startswith("<") or not os.path.exists(path):
        why = ("spawn, as CUDA is already initialised in this process (a tensor or model was put on a GPU) and a "
               "forked replica could not use it" if cuda_initialised else "start_method='spawn'")
        fix = ("restart the kernel and call launch before any GPU work (fork, the default then, takes a function "
               "defined here), or put the function in a file (train.py) and `from train import fn`"
               if cuda_initialised else "start_method='fork' (the default while CUDA is not initialised), or save "
               "the code to a file and run that")
        raise StrategyStartError(
            f"allgpu.launch() cannot start {name!r} with {why}: spawn re-imports its module "
            f"{getattr(fn, '__module__', '?')!r} from a file in every replica, and that module has none (a notebook "
            f"cell, standard input, python -c, or an interactive session). Fix: {fix}.")
    return start_method
