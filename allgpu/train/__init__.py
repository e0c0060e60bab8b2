"""``fit`` and ``evaluate``: a Keras-like training loop on any strategy, and its collaborators.

- :mod:`~allgpu.train.loop`: ``fit`` and ``evaluate``, the loop itself;
- :mod:`~allgpu.train.epoch`: one epoch's steps (input, forward and backward, optimizer step);
- :mod:`~allgpu.train.precision`: autocast and fp16 loss scaling;
- :mod:`~allgpu.train.checkpoint_plan`: save every N steps and at epoch ends, resume automatically;
- :mod:`~allgpu.train.metrics`: metric sums reduced across replicas once an epoch;
- :mod:`~allgpu.train.progress`: the progress display (replica 0) and the ``Callback`` base.
"""

from allgpu.train.loop import History, evaluate, fit
from allgpu.train.progress import Callback

__all__ = ["Callback", "History", "evaluate", "fit"]
