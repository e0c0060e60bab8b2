"""Loss scaling as TensorFlow writes it, with the same gradients as one device at every replica count.

allgpu *averages* gradients across replicas (as DDP does); ``tf.distribute`` *sums* them. A per-replica loss
must therefore be the mean over the replica's own examples (``loss_fn(...)`` with ``reduction="mean"``, what
``fit`` and the README loop use): the average of N replica means is the mean over the global batch.
TensorFlow's custom-training tutorial instead divides the sum of per-example losses by the *global* batch
(``tf.nn.compute_average_loss``); written by hand under allgpu that gradient is N times too small, which is the
learning rate divided by N. :func:`compute_average_loss` gives that spelling a correct home.
"""

from __future__ import annotations

import torch

from allgpu.errors import ArgumentError


def compute_average_loss(per_example_loss: torch.Tensor, global_batch_size: int | None = None, *,
                         sample_weight: torch.Tensor | float | None = None, strategy=None) -> torch.Tensor:
    """``sum(per_example_loss * sample_weight) / global_batch_size``, TensorFlow's value, allgpu's gradients.

    Follows ``tf.nn.compute_average_loss``. The value returned on each replica is TensorFlow's (so
    ``strategy.reduce("sum", loss)`` is the mean over the global batch, as in TF's tutorials); its gradient
    is scaled by ``num_replicas_in_sync`` (over the replica's gradient weight on a short last batch) so that,
    after allgpu averages gradients across replicas, every replica holds the gradient one device computes on the
    whole global batch.

    Args:
        per_example_loss: shape ``(b,)`` (or ``(b, ...)``: summed over every element), this replica's examples,
            e.g. ``F.cross_entropy(out, y, reduction="none")``.
        global_batch_size: examples per step across all replicas; default ``b * num_replicas_in_sync``.
        sample_weight: a scalar or a tensor broadcastable to ``per_example_loss``.
        strategy: whose replica count to use; default the newest live strategy (one replica without any).

    Returns:
        A scalar tensor.

    Raises:
        ValueError: ``global_batch_size`` is not a positive integer. Not a collective.
    """
    if strategy is None:
        from allgpu.runtime.live import current

        strategy = current()
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    if global_batch_size is None:
        global_batch_size = per_example_loss.shape[0] * replicas if per_example_loss.dim() else replicas
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) or global_batch_size < 1:
        raise ArgumentError(f"compute_average_loss(global_batch_size={global_batch_size!r}); expected a positive int, "
                         "the examples per step across all replicas.")
    if sample_weight is not None:
        per_example_loss = per_example_loss * sample_weight
    value = per_example_loss.sum() / global_batch_size
    # Forward: TF's value. Backward: N / w times its gradient, undone by allgpu's weighted average across N
    # replicas (w: this replica's share of a short last batch times N, set by the distributed dataset; else 1).
    weight = getattr(getattr(strategy, "gradient_sync", None), "weight", 1.0) or 1.0  # 0: the sync zeroes it
    scale = replicas / weight
    if scale == 1:
        return value
    return value + (scale - 1) * (value - value.detach())


def scale_regularization_loss(regularization_loss, strategy=None) -> torch.Tensor:
    """``regularization_loss / num_replicas_in_sync``, TensorFlow's value, with allgpu's gradients.

    Follows ``tf.nn.scale_regularization_loss`` (TensorFlow's tutorials add
    ``tf.nn.scale_regularization_loss(tf.add_n(model.losses))`` to :func:`compute_average_loss`'s value). The value
    on each replica is TensorFlow's, so ``strategy.reduce("sum", loss)`` counts the regularization once at every
    replica count, as in TensorFlow; its gradient is scaled by ``num_replicas_in_sync`` so that, after allgpu
    averages gradients across replicas, every replica holds the regularization's whole gradient (one device's).

    Args:
        regularization_loss: a scalar tensor (``sum(model.losses)``), or a list of them (summed).
        strategy: whose replica count to use; default the newest live strategy (one replica without any).

    Returns:
        A scalar tensor. Not a collective.
    """
    if strategy is None:
        from allgpu.runtime.live import current

        strategy = current()
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    if isinstance(regularization_loss, (list, tuple)):
        regularization_loss = sum(regularization_loss)
    value = regularization_loss / replicas
    if replicas == 1 or not isinstance(value, torch.Tensor):
        return value
    return value + (replicas - 1) * (value - value.detach())
