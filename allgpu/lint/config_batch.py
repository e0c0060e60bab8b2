"""TF007 when the batch size comes from a configuration mapping and nothing in the file scales it.

``config = yaml.safe_load(...)``; ``dataset = build_dataset(preprocess_config=config["train"]["preprocess"])``;
``model.fit(dataset)`` under a ``MirroredStrategy``, where the file also reads
``config["train"]["preprocess"]["batch_size"]``: the builder batches by the configured number, which is then the
*global* batch, split across the replicas (DeepReg's "batch_size in config is per device" fix). Reported at the
builder's call, or at ``.batch(config[...]["batch_size"])`` in a pipeline training consumes, only when the file
never mentions the replica count (``num_replicas_in_sync``, a per-replica or global batch, an input context).
"""

from __future__ import annotations

import ast

_REPLICA_WORDS = ("num_replicas", "replicas_in_sync", "per_replica", "global_batch", "input_context",
                  "num_devices", "num_gpus", "n_gpus")
_BATCH_KEYS = ("batch_size", "train_batch_size", "batch")


def subscript_path(node: ast.AST) -> tuple | None:
    """``config["train"]["preprocess"]`` -> ``("config", "train", "preprocess")``; a bare name -> ``(name,)``;
    None for anything else (a non-constant key, an attribute)."""
    keys = []
    while isinstance(node, ast.Subscript):
        k = node.slice
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            return None
        keys.append(k.value)
        node = node.value
    return (node.id, *reversed(keys)) if isinstance(node, ast.Name) else None


def _config_batches(mod) -> list[tuple]:
    """The configuration entries the file reads as a batch size: ``cfg["train"]["batch_size"]``."""
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Store):
            p = subscript_path(node)
            if p is not None and len(p) >= 2 and p[-1] in _BATCH_KEYS:
                out.append(p)
    return out


def _producer(mod, expr: ast.expr) -> ast.Call | None:
    """The call whose result ``expr`` (a name) was bound to: ``a, ds, n = build_dataset(...)`` -> that call."""
    if isinstance(expr, ast.Call):
        return expr
    if not isinstance(expr, ast.Name):
        return None
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for t in node.targets:
                names = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
                if any(isinstance(n, ast.Name) and n.id == expr.id for n in names):
                    return node.value
    return None


def check_config_batch(ctx, training_inputs: list, trained_batch_calls: list) -> None:
    """Report the builder calls (and ``.batch()`` calls) of training's pipelines that batch by a configured
    number the file never scales by the replica count."""
    mod = ctx.mod
    if any(w in mod.source for w in _REPLICA_WORDS):
        return
    paths = _config_batches(mod)
    if not paths:
        return
    msg = ("batch size read from the configuration ({}) is used as the global batch: with N replicas each GPU "
           "gets 1/N of it; scale it by strategy.num_replicas_in_sync")
    for call in trained_batch_calls:
        p = subscript_path(call.args[0]) if call.args else None
        if p in paths:
            ctx.emit("TF007", call, msg.format("".join(f"[{k!r}]" for k in p[1:])))
    seen: set[int] = set()
    for expr in training_inputs:
        call = _producer(mod, expr)
        if call is None or id(call) in seen:
            continue
        seen.add(id(call))
        for a in (*call.args, *(k.value for k in call.keywords)):
            p = subscript_path(a)
            hit = next((bp for bp in paths if p is not None and bp[:len(p)] == p), None)
            if hit is not None:
                ctx.emit("TF007", call, msg.format("".join(f"[{k!r}]" for k in hit[1:])))
                break
