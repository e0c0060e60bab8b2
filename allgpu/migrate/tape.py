"""The canonical ``tf.GradientTape`` step, rewritten to Keras 3's PyTorch-backend step.

TensorFlow::

    with tf.GradientTape() as tape:
        predictions = model(x)
        loss = loss_fn(y, predictions)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))   # or Keras 3's optimizer.apply(grads, ...)

becomes, exactly as Keras' guide "Writing a training loop from scratch in PyTorch" writes it with a Keras optimizer
(keras.io/guides/writing_a_custom_training_loop_in_torch)::

    predictions = model(x)
    loss = loss_fn(y, predictions)
    model.zero_grad()
    trainable_weights = [v for v in model.trainable_variables]
    loss.backward()
    grads = [v.value.grad for v in trainable_weights]
    with torch.no_grad():
        optimizer.apply(grads, trainable_weights)

Under an allgpu strategy ``loss.backward()`` returns with the gradients averaged across replicas, so the step is
the same on one device or many. Anything else (a persistent tape, ``tape.watch``, gradients of something other
than ``<model>.trainable_variables``, code between the three statements) is left alone and reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from allgpu.migrate.cst import assigned_name, code, dotted, statement

WEIGHTS = "trainable_weights"


@dataclass(frozen=True)
class TapeStep:
    """The parts of one canonical step, as source text."""

    body: tuple[cst.BaseStatement, ...]
    loss: str
    grads: str
    variables: str
    model: str
    optimizer: str


def _single_expr(stmt: cst.BaseStatement) -> cst.BaseExpression | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr):
        return stmt.body[0].value
    return None


def is_tape(stmt: cst.BaseStatement, aliases: dict[str, str]) -> bool:
    """``with tf.GradientTape(...) [as tape]:`` (any arguments)."""
    if not isinstance(stmt, cst.With) or len(stmt.items) != 1:
        return False
    call = stmt.items[0].item
    name = dotted(call.func) if isinstance(call, cst.Call) else None
    head, _, rest = (name or "").partition(".")
    return head in aliases and f"{aliases[head]}.{rest}" == "tensorflow.GradientTape"


def _assigned(body: tuple[cst.BaseStatement, ...], name: str) -> bool:
    for stmt in body:
        target = assigned_name(stmt)
        if target and target[0] == name:
            return True
    return False


def _uses(nodes, name: str) -> bool:
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                found.append(node)

    for node in nodes:
        node.visit(_Find())
    return bool(found)


def match(stmts: list[cst.BaseStatement], aliases: dict[str, str]) -> TapeStep | None:
    """The canonical step in ``stmts[0:3]`` (tape block, gradient, apply), or None when it is not exactly that."""
    if len(stmts) < 3 or not is_tape(stmts[0], aliases):
        return None
    with_stmt, grad_stmt, apply_stmt = stmts[:3]
    call, item = with_stmt.items[0].item, with_stmt.items[0]
    if call.args or item.asname is None or not isinstance(item.asname.name, cst.Name):
        return None  # persistent=True, watch_accessed_variables=False, or no name: not the canonical tape
    tape = item.asname.name.value
    grad = assigned_name(grad_stmt)
    if grad is None or not isinstance(grad[1], cst.Call) or dotted(grad[1].func) != f"{tape}.gradient":
        return None
    if len(grad[1].args) != 2 or any(a.keyword for a in grad[1].args):
        return None
    loss, variables = dotted(grad[1].args[0].value), code(grad[1].args[1].value)
    model, _, attr = variables.rpartition(".")
    if not loss or attr not in ("trainable_variables", "trainable_weights") or dotted(grad[1].args[1].value) is None:
        return None
    optimizer = _applied_by(_single_expr(apply_stmt), grad[0], variables)
    if optimizer is None:
        return None
    body = tuple(with_stmt.body.body) if isinstance(with_stmt.body, cst.IndentedBlock) else ()
    if not body or not _assigned(body, loss) or _uses(body, tape):
        return None
    return TapeStep(body, loss, grad[0], variables, model, optimizer)


def _applied_by(apply: cst.BaseExpression | None, grads: str, variables: str) -> str | None:
    """The optimizer of ``opt.apply_gradients(zip(grads, variables))`` or of Keras 3's ``opt.apply(grads,
    variables)`` (keras-io's TensorFlow training-loop guide writes the latter), else None."""
    func = dotted(apply.func) if isinstance(apply, cst.Call) else None
    if func is None or any(a.keyword or a.star for a in apply.args):
        return None
    optimizer, _, method = func.rpartition(".")
    if method == "apply" and len(apply.args) == 2:
        pair = [a.value for a in apply.args]
    elif method == "apply_gradients" and len(apply.args) == 1:
        zipped = apply.args[0].value
        if not (isinstance(zipped, cst.Call) and dotted(zipped.func) == "zip" and len(zipped.args) == 2):
            return None
        pair = [a.value for a in zipped.args]
    else:
        return None
    if not optimizer or dotted(pair[0]) != grads or code(pair[1]) != variables:
        return None
    return optimizer


def rewrite(step: TapeStep, first: cst.BaseStatement) -> list[cst.BaseStatement]:
    """The PyTorch-backend statements replacing the step; the tape's leading comments stay on the first one."""
    tail = [
        statement(f"{step.model}.zero_grad()\n"),
        statement(f"{WEIGHTS} = [v for v in {step.variables}]\n"),
        statement(f"{step.loss}.backward()\n"),
        statement(f"{step.grads} = [v.value.grad for v in {WEIGHTS}]\n"),
        statement(f"with torch.no_grad():\n    {step.optimizer}.apply({step.grads}, {WEIGHTS})\n"),
    ]
    body = list(step.body)
    body[0] = body[0].with_changes(leading_lines=first.leading_lines)
    return body + tail


def rewrite_block(stmts: list[cst.BaseStatement], lines: list[int], aliases: dict[str, str],
                  taken: set[str]) -> tuple[list[cst.BaseStatement], list[int], list[int]]:
    """Rewrite every canonical step in one block of statements.

    Args:
        stmts: the block's statements; ``lines``: each one's line in the original script.
        aliases: TensorFlow's local names; ``taken``: names the script already uses (``trainable_weights`` must
            be free, or the step is left alone).

    Returns:
        ``(statements, converted_lines, refused_lines)``: the new block, the lines of the tapes rewritten and of
        the tapes left alone.
    """
    out: list[cst.BaseStatement] = []
    converted, refused = [], []
    i = 0
    while i < len(stmts):
        step = match(stmts[i:i + 3], aliases) if WEIGHTS not in taken else None
        if step is not None:
            out += rewrite(step, stmts[i])
            converted.append(lines[i])
            i += 3
            continue
        if is_tape(stmts[i], aliases):
            refused.append(lines[i])
        out.append(stmts[i])
        i += 1
    return out, converted, refused
