"""Checkpoints that survive crashes and a change in the number of replicas.

``save`` / ``restore`` / ``latest_checkpoint`` / ``restore_rng`` / ``wait_pending``; see ``api.py``. Files:
``format.py`` (checksummed atomic file), ``store.py`` (directory, latest, keep K), ``sharded.py``
(``torch.distributed.checkpoint``), ``pending.py`` (background writes), ``state.py`` (what is stored).
TensorFlow's spelling: ``Checkpoint`` (``tf_checkpoint.py``), ``CheckpointManager`` (``tf_manager.py``),
``tf_layout.py`` (``prefix-N`` names and the ``checkpoint`` state file), ``trackables.py`` (what each object saves).
"""

from allgpu.checkpoint.api import latest_checkpoint, restore, restore_rng, save
from allgpu.checkpoint.format import CorruptCheckpointError
from allgpu.checkpoint.pending import PendingCheckpoint, wait_pending
from allgpu.checkpoint.state import CheckpointState
from allgpu.checkpoint.tf_checkpoint import Checkpoint, CheckpointLoadStatus
from allgpu.checkpoint.tf_manager import CheckpointManager
from allgpu.errors import CheckpointError

__all__ = [
    "Checkpoint",
    "CheckpointLoadStatus",
    "CheckpointManager",
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
