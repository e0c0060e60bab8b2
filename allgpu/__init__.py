"""allgpu: every device you have works on your training; when one sits idle, allgpu tells you why.

Glossary (``tf.distribute``'s, with PyTorch's names beside it):

- *replica*: one process bound to one device; *rank* is its index, ``replica_id_in_sync``.
- *num_replicas_in_sync*: replicas in the job, PyTorch's *world size*.
- *global batch*: examples per step across all replicas; each replica gets ``global_batch_size / N``.
- *mirrored*: a parameter kept identical on every replica, its gradient averaged by all-reduce.
"""

from allgpu.data import InputContext
from allgpu.devices import Device, parse_device, visible_devices
from allgpu.launch import launch
from allgpu.strategies import MirroredStrategy, OneDeviceStrategy, Strategy

__version__ = "0.1.0"

__all__ = [
    "Device",
    "InputContext",
    "MirroredStrategy",
    "OneDeviceStrategy",
    "Strategy",
    "launch",
    "parse_device",
    "visible_devices",
]
