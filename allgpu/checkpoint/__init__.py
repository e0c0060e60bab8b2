"""Checkpoints that survive crashes and a change in the number of replicas.

``save`` / ``restore`` / ``latest_checkpoint`` / ``restore_rng`` / ``wait_pending``; see ``api.py``. Files:
``format.py`` (checksummed atomic file), ``store.py`` (directory, latest, keep K), ``sharded.py``
(``torch.distributed.checkpoint``), ``pending.py`` (background writes), ``state.py`` (what is stored).
"""

from allgpu.checkpoint.api import latest_checkpoint, restore, restore_rng, save
from allgpu.checkpoint.format import CorruptCheckpointError
from allgpu.checkpoint.pending import PendingCheckpoint, wait_pending
from allgpu.checkpoint.state import CheckpointState
from allgpu.errors import CheckpointError

__all__ = [
    "CheckpointError",
    "CheckpointState",
    "CorruptCheckpointError",
    "PendingCheckpoint",
    "latest_checkpoint",
    "restore",
    "restore_rng",
    "save",
    "wait_pending",
]
