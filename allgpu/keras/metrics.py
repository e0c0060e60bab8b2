"""Keras metric state read across replicas: ``tf.distribute``'s sync-on-read metric variables.

Under ``tf.distribute`` a metric's variables (``total``, ``count``, ...) are *sync-on-read*: each replica updates its
own copy inside ``strategy.run``, and reading ``metric.result()`` outside it sums the copies first, so the result
covers every replica's examples. TensorFlow's custom-training tutorial relies on it: ``train_accuracy.update_state``
inside the step, ``train_accuracy.result()`` printed after the epoch. Here replicas are processes, so a read sums the
variables across them (one all-reduce, a collective: every replica reads, as every replica of one program does),
computes the result from the sums and puts the local values back.

- :func:`read_reduced`: the mechanism, shared by a model's ``get_metrics_result`` (:mod:`allgpu.keras.replica`)
  and by single metrics.
- :func:`sync_on_read`: makes ``result()`` of a metric constructed inside a multi-replica strategy's ``scope()``
  read across replicas. Inside ``strategy.run`` (a replica's step) and while a model reads its own metrics
  (:func:`local_reads`), ``result()`` stays local, as in ``tf.distribute``'s replica context.

Keras is not imported here: metrics reach this module only once Keras made them.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator

import torch

_LOCAL: contextvars.ContextVar[bool] = contextvars.ContextVar("allgpu_metric_reads_local", default=False)
REDUCED = ("sum", "mean")  # Keras variable aggregations combined across replicas; others stay local


@contextlib.contextmanager
def local_reads() -> Iterator[None]:
    """Within it, a sync-on-read metric's ``result()`` is this replica's own (replica context). Local."""
    token = _LOCAL.set(True)
    try:
        yield
    finally:
        _LOCAL.reset(token)


def read_reduced(strategy, variables: list, compute: Callable[[], Any]) -> Any:
    """``compute()`` with ``variables`` summed (aggregation ``"sum"``) or averaged (``"mean"``) over replicas,
    then their local values restored. A collective (one all-reduce of every variable, as float64)."""
    variables = [v for v in variables if v.aggregation in REDUCED]
    if not variables:
        return compute()
    local = [v.value.detach().clone() for v in variables]
    total = strategy.reduce("sum", torch.cat([t.reshape(-1).to(torch.float64) for t in local]))
    offset = 0
    try:
        for v, t in zip(variables, local):
            part = total[offset:offset + t.numel()].view(t.shape)
            v.assign((part / strategy.num_replicas_in_sync if v.aggregation == "mean" else part).to(t.dtype))
            offset += t.numel()
        with local_reads():
            result = compute()
        # copies: a result may be the variable's own tensor (Sum's), which the restore below overwrites in place
        from keras import tree

        return tree.map_structure(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, result)
    finally:
        for v, t in zip(variables, local):
            v.assign(t)


def sync_on_read(strategy, metrics: list) -> None:
    """Make each metric's ``result()`` read across the replicas of ``strategy`` (outside ``local_reads``).

    A metric made by another metric's construction (Keras's ``CompileMetrics`` wraps the metrics it compiles) is
    read through its owner, so only the metrics whose construction returned outermost are passed here.
    """
    if strategy.num_replicas_in_sync == 1:
        return
    for metric in metrics:
        if "_allgpu_local_result" in metric.__dict__:
            continue
        local_result = metric.result  # the bound method of the metric's class

        def result(local_result=local_result, metric=metric):
            if _LOCAL.get():
                return local_result()
            return read_reduced(strategy, list(metric.variables), local_result)

        object.__setattr__(metric, "_allgpu_local_result", local_result)
        object.__setattr__(metric, "result", result)
