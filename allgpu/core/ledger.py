"""A small per-replica ledger of collectives, kept in the job's rendezvous store, that turns a hang into a name.

Each replica records, before each collective it issues through a strategy (and, for models of 1M+ gradient
elements, once per backward round's gradient all-reduce: ``allgpu.core.sync.GradientSync.record_rounds``), its sequence
number, the operation, the tensor shapes, the user's source line and the current step (when the step monitor
runs), under ``allgpu/ledger/<rank>`` in the process group's store (a ``torch.distributed.TCPStore``). When a collective fails or times out, the replica
reads every entry and says which replica is behind or diverged, at which collective, from which line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from allgpu.core.one_writer import exists_hint, read_hint
from allgpu.core.port_hints import ddp_module_hint

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # allgpu/
_KEY = "allgpu/ledger/{}"
_EXIT_KEY = "allgpu/ledger/exited/{}"
EXIT_RECORD_S = 2.0  # at most this long spent telling the store that this replica is ending


def user_line() -> str:
    """``file:line`` of the innermost caller outside allgpu and torch (the user's code that issued a call)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_PACKAGE_DIR) and f"{os.sep}torch{os.sep}" not in path and "contextlib" not in path:
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


@dataclass
class Entry:
    seq: int
    op: str
    shapes: list
    where: str
    step: int | None
    time: float

    def describe(self) -> str:
        step = f" (step {self.step})" if self.step is not None else ""  # known when the step monitor runs
        return f"collective #{self.seq} {self.op} {self.shapes} at {self.where}{step}"


class Ledger:
    """Records this replica's collectives; explains a failed one from every replica's record.

    Args:
        store: the process group's key-value store, or None (a world of one: nothing to record).
        rank / world_size: this replica's place.
    """

    def __init__(self, store, rank: int, world_size: int):
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.seq = 0
        self.step: int | None = None  # the training step, set by the step monitor when it runs
        self.last: Entry | None = None

    def enter(self, op: str, shapes: list, where: str | None = None) -> Entry:
        self.seq += 1
        entry = Entry(self.seq, op, shapes, where or user_line(), self.step, time.time())
        self.last = entry
        if self.store is not None:
            self.store.set(_KEY.format(self.rank), json.dumps(entry.__dict__))
        return entry

    def record_exit(self, how: str) -> None:
        """Say in the store that this replica is ending (``how``: "raised X: ... at train.py:40", "finished its
        script"), so the others' errors name it as ended, never as "behind". Waits at most ``EXIT_RECORD_S``."""
        if self.store is None:
            return
        after = f" after its {self.last.describe()}" if self.last else " before issuing any collective"
        thread = threading.Thread(target=self._set_quietly, args=(_EXIT_KEY.format(self.rank), how + after),
                                  daemon=True)
        thread.start()
        thread.join(EXIT_RECORD_S)

    def _set_quietly(self, key: str, value: str) -> None:
        try:
            self.store.set(key, value)
        except Exception:  # the store (replica 0's process) is gone: nobody is left to tell
            pass

    def exits(self) -> dict[int, str]:
        """The replicas that recorded their end, with how they ended."""
        keys = {rank: _EXIT_KEY.format(rank) for rank in range(self.world_size) if rank != self.rank}
        return {rank: self.store.get(key).decode() for rank, key in keys.items() if self.store.check([key])}

    def read_all(self) -> dict[int, Entry | None]:
        """Every replica's last entry (None where a replica has issued none). Raises if the store is gone."""
        out: dict[int, Entry | None] = {}
        for rank in range(self.world_size):
            key = _KEY.format(rank)
            out[rank] = Entry(**json.loads(self.store.get(key))) if self.store.check([key]) else None
        return out

    def explain(self, waited_s: float | None = None, current: str | None = None) -> tuple[str, list[int]]:
        """A paragraph naming the replicas that are behind or diverged, and their ranks. ``current`` names the
        collective that failed when it is not a recorded one (the gradient all-reduce, issued every step)."""
        mine = self.last
        head = f"replica {self.rank} " + (f"waited {waited_s:.1f} s in " if waited_s is not None else "failed in ")
        head += current or (mine.describe() if mine else "a collective")
        if self.store is None:
            return head + ".", []
        try:
            entries = self.read_all()
        except Exception as exc:  # the store lives in replica 0's process; it may be gone
            return f"{head}. The job's store could not be read ({exc}); replica 0 may have exited.", []
        try:
            ended = self.exits()
        except Exception:
            ended = {}
        lines, culprits = [], []
        for rank, entry in entries.items():
            if rank == self.rank:
                continue
            if rank in ended:
                lines.append(f"replica {rank} has ended: it {ended[rank]}")
                culprits.append(rank)
            elif entry is None:
                lines.append(f"replica {rank} has issued no collective yet")
                culprits.append(rank)
            elif mine is not None and entry.seq < mine.seq:
                lines.append(f"replica {rank} is behind, at {entry.describe()}")
                culprits.append(rank)
            elif mine is not None and entry.seq == mine.seq and (entry.op, entry.shapes) != (mine.op, mine.shapes):
                lines.append(f"replica {rank} diverged: its {entry.describe()}")
                culprits.append(rank)
            elif mine is not None and entry.seq > mine.seq:
                lines.append(f"replica {rank} is ahead, at {entry.describe()}")
        if not culprits and not lines:
            if current:
                return head + ("; every replica's last recorded collective is the same, so the missing replica is "
                               "the one that died or froze (the supervisor names it)."), []
            return head + "; every replica reached the same collective (a network or device fault?).", []
        return head + ". " + "; ".join(lines) + ".", culprits


def install_exit_record(ledger: Ledger) -> None:
    """Record in ``ledger`` how this replica ends when an exception escapes the script (``sys.excepthook``,
    chained to the one installed before)."""
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if not issubclass(exc_type, KeyboardInterrupt):
            where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(traceback.extract_tb(tb))
                          if not f.filename.startswith(_PACKAGE_DIR) and f"{os.sep}torch{os.sep}" not in f.filename),
                         "?")
            text = str(exc).splitlines()[0] if str(exc) else ""
            text = text if len(text) <= 160 else text[:157] + "..."
            ledger.record_exit(f"raised {exc_type.__name__}{': ' + text if text else ''} at {where}")
            hint = read_hint(exc, ledger.rank) or exists_hint(exc) or ddp_module_hint(exc)
            if hint and hasattr(exc, "add_note"):  # shown with the traceback, in the job's failure summary too
                exc.add_note(hint)
        previous(exc_type, exc, tb)

    sys.excepthook = hook
