"""Gradient accumulation that steps the optimizer every k micro-steps while ``backward()`` runs on each, for
PT006: in a training loop (``if (i + 1) % accum_steps == 0: optimizer.step()``) and in a per-batch step method
a framework calls once per batch (ClassyVision's ``run_optimizer``); the engines' variants (Accelerate, Lightning
Fabric), and ``no_sync()`` blocks that hold the backward but not the forward."""

from __future__ import annotations

import ast
import re

from allgpu.lint.resolve import dotted, iter_body_nodes
from allgpu.lint.torch_train import _ACCUM, micro_step_backwards, sync_controlled

_ACCUM_TEST = re.compile(r"accum|micro|update|sync")


def under_accumulation_test(mod, node: ast.AST, loop: ast.AST) -> bool:
    """Is ``node`` under an ``if`` (inside ``loop``) that counts micro-steps: ``(i + 1) % k == 0``,
    ``ni - last_opt_step >= accumulate``? (``if use_amp: scaler.step(opt)`` is not one.)"""
    child = node
    for anc in mod.ancestors(node):
        if anc is loop:
            return _skipped_before(mod, child, loop)
        if isinstance(anc, ast.If) and _counts_micro_steps(mod, anc.test, loop):
            return True
        child = anc
    return False


def _counts_micro_steps(mod, test: ast.expr, loop: ast.AST) -> bool:
    """A ``%`` in ``test``, a name that says accumulation, or a name the loop binds to a ``%`` comparison
    (``should_step = (step + 1) % k == 0`` ... ``if should_step:``)."""
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            return True
        name = dotted(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
        if name and _ACCUM_TEST.search(name.lower()):
            return True
        if isinstance(n, ast.Name) and any(_modulo_compare(v) and any(a is loop for a in mod.ancestors(v))
                                           for v in mod.values_of(n)):
            return True
    return False


def _skipped_before(mod, stmt: ast.AST, loop: ast.AST) -> bool:
    """An earlier statement of the loop's body skips the rest of the pass on a micro-step test
    (``if (i + 1) % k != 0: continue``), so ``stmt`` runs every k passes."""
    body = getattr(loop, "body", [])
    if not any(stmt is st for st in body):
        return False
    before = body[:next(i for i, x in enumerate(body) if x is stmt)]
    for j, st in enumerate(before):
        if isinstance(st, ast.If) and len(st.body) == 1 and isinstance(st.body[0], ast.Continue) and \
                _counts_micro_steps(mod, st.test, loop) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
                for s in before[:j] for n in ast.walk(s)):
            return True  # the backward runs before the skip (a skip before it too is a rank's share of batches)
    return False


def stepped_every_k(ctx, does, loops: bool = True) -> list[ast.Call]:
    """The unconditional backward of each loop that steps the optimizer only under a micro-step test
    (``if (i + 1) % accum_steps == 0: optimizer.step()``), in a file that names an accumulation count; and of
    each step method a framework calls once per batch (``loss.backward()`` then ``if update_idx % period ==
    period - 1: self.optimizer.step()`` in one function, no loop of its own: ClassyVision's ``run_optimizer``)."""
    mod, facts = ctx.mod, ctx.facts
    out = []
    if loops and any(_ACCUM.search(n.lower()) for n in mod.name_ids | mod.attrs.keys()):
        for loop in mod.loops:
            back = _backward_stepped_every_k(mod, facts, does, loop, loop.body, under_accumulation_test)
            if back is not None:
                out.append(back)
    for fn in _modulo_step_functions(mod, facts):
        back = _backward_stepped_every_k(mod, facts, does, fn, fn.body, _under_modulo_test)
        if back is not None and not any(back is b for b in out):
            out.append(back)
    return out


def unsynced_step_functions(ctx, does) -> list[ast.Call]:
    """The backward of each per-batch step function that steps every k calls (``stepped_every_k``) and does not
    decide when gradients sync, in a file that controls syncing elsewhere (speechbrain's ``Brain.fit_batch`` beside
    the ``Brain.no_sync`` it defines and never enters, a0502)."""
    mod = ctx.mod
    return [b for b in stepped_every_k(ctx, does, loops=False)
            if mod.enclosing_function(b) is not None and not sync_controlled(mod, b)]


def _modulo_step_functions(mod, facts) -> list:
    """Functions with an ``optimizer.step()`` of their own under a ``%`` test (found from the calls: cheap)."""
    out = []
    for call, qn in mod.calls:
        if qn is None and isinstance(call.func, ast.Attribute) and "optstep" in facts.call_features(call):
            fn = mod.enclosing_function(call)
            if fn is not None and not any(f is fn for f in out) and _under_modulo_test(mod, call, fn):
                out.append(fn)
    return out


def _backward_stepped_every_k(mod, facts, does, root, body, step_test) -> ast.Call | None:
    """The first backward in ``body`` that runs on every pass when an optimizer step in it runs only under
    ``step_test``; a backward in an ``if``/``else`` whose other branch backwards too (``if amp: scaled.backward()
    else: loss.backward()``) runs on every pass."""
    nodes = [n for n in iter_body_nodes(body) if isinstance(n, ast.Call)]
    if not any(step_test(mod, n, root) and does(n, "optstep") for n in nodes):
        return None  # the cheap test first: few calls sit under a micro-step test
    steps = [n for n in nodes if does(n, "optstep")]
    if isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # a per-batch step function: straight-line code (loops inside are the loop variant's), every step under
        # the test (a GAN's generator stepped every n_critic batches beside a discriminator stepped each one is not)
        nodes = [n for n in nodes if not any(isinstance(a, (ast.For, ast.AsyncFor, ast.While)) for a in
                                             _ancestors_below(mod, n, root))]
        if not all(step_test(mod, n, root) for n in steps):
            return None
    backs = [n for n in nodes if does(n, "backward") and _always_runs(mod, does, n, root)]
    tested = [n for n in steps if _under_modulo_test(mod, n, root)] or [n for n in steps if step_test(mod, n, root)]
    # of ``if accum > 1: loss.backward(); if (i + 1) % accum == 0: step()  else: loss.backward(); step()``, the
    # backward on the accumulating branch (the one whose branch holds the tested step)
    return next((b for b in backs if _shares_branch(mod, b, tested, root)), backs[0] if backs else None)


def _shares_branch(mod, node: ast.AST, others: list, root: ast.AST) -> bool:
    """Is one of ``others`` on the same side (body or else) of ``node``'s nearest ``if``?"""
    child = node
    for anc in _ancestors_below(mod, node, root):
        if isinstance(anc, ast.If):
            side = anc.body if any(child is st for st in anc.body) else anc.orelse
            ids = {id(st) for st in side}
            return any(any(id(a) in ids for a in (o, *mod.ancestors(o))) for o in others)
        child = anc
    return True


def _ancestors_below(mod, node: ast.AST, root: ast.AST):
    for anc in mod.ancestors(node):
        if anc is root:
            return
        yield anc


def _always_runs(mod, does, node: ast.AST, root: ast.AST) -> bool:
    child = node
    for anc in mod.ancestors(node):
        if anc is root:
            return True
        if isinstance(anc, ast.IfExp):
            return False
        if isinstance(anc, ast.If):
            other = anc.orelse if any(child is st for st in anc.body) else anc.body if any(
                child is st for st in anc.orelse) else None
            if not other or not any(isinstance(n, ast.Call) and does(n, "backward") for n in iter_body_nodes(other)):
                return False
        child = anc
    return False


def _under_modulo_test(mod, node: ast.AST, fn: ast.AST) -> bool:
    """``node`` sits under ``if idx % period == period - 1:`` (a ``%`` compared in the test) inside ``fn``, also
    through a name ``fn`` binds to such a comparison (``should_step = self.step % k == 0`` ... ``if should_step:``,
    speechbrain's ``Brain.fit_batch``)."""
    for anc in mod.ancestors(node):
        if anc is fn:
            return False
        if isinstance(anc, ast.If) and any(_modulo_compare(n) or (isinstance(n, ast.Name) and any(
                _modulo_compare(v) and any(a is fn for a in mod.ancestors(v)) for v in mod.values_of(n)))
                for n in ast.walk(anc.test)):
            return True
    return False


def _modulo_compare(node: ast.AST) -> bool:
    """``a % k == c`` (a ``%`` inside a comparison)."""
    return isinstance(node, ast.Compare) and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)
                                                 for b in ast.walk(node))


_FABRIC = ("lightning.fabric.Fabric", "lightning.Fabric", "lightning_fabric.Fabric", "lightning.fabric.fabric.Fabric")


def engine_accumulation(ctx, backward, does) -> bool:
    """PT006 for scripts an engine distributes: Accelerate syncs every ``accelerator.backward`` unless inside
    ``with accelerator.accumulate(model):`` (or no_sync); Lightning Fabric syncs every ``fabric.backward``
    unless inside ``with fabric.no_backward_sync(model):`` (alphafold3-pytorch's trainer). Emits the
    findings; True when the file is such a script (the DDP checks do not apply to it)."""
    mod = ctx.mod
    if mod.is_imported("accelerate"):
        if "accumulate" not in mod.attrs:
            for back in micro_step_backwards(mod, ctx.facts, backward) or stepped_every_k(ctx, does)[:1]:
                ctx.emit("PT006", back, "accumulating gradients over micro-steps under Accelerate without "
                                        "`with accelerator.accumulate(model):` (or no_sync): every micro-step all-reduces")
        return True
    if any(qn in _FABRIC for _, qn in mod.calls):
        if "no_backward_sync" not in mod.attrs:
            for back in micro_step_backwards(mod, ctx.facts, backward) or stepped_every_k(ctx, does)[:1]:
                ctx.emit("PT006", back, "accumulating gradients over micro-steps under Lightning Fabric without "
                                        "`with fabric.no_backward_sync(model, enabled=...):`: every micro-step all-reduces")
        return True
    return False


def _no_sync_item(mod, expr: ast.expr) -> bool:
    """``model.no_sync()``, or a name bound to one (``ctx = model.no_sync() if not step else nullcontext()``)."""
    values = [expr] if isinstance(expr, ast.Call) else mod.values_of(expr) if isinstance(expr, ast.Name) else []
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "no_sync"
               for v in values for n in ast.walk(v))


def _backward_only(facts, stmts: list) -> list[ast.Call]:
    """The backward calls of ``stmts`` when the statements do nothing else (no assignment, no other call: the loss
    was computed before them); else []."""
    out = []
    for st in stmts:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and "backward" in facts.call_features(st.value):
            out.append(st.value)
        elif isinstance(st, ast.If):
            inner = [_backward_only(facts, part) if part else [] for part in (st.body, st.orelse)]
            if any(part and not found for part, found in zip((st.body, st.orelse), inner)):
                return []
            out += inner[0] + inner[1]
        elif isinstance(st, ast.With):  # ``with amp.scale_loss(loss, opt) as scaled: scaled.backward()``
            found = _backward_only(facts, st.body)
            if not found:
                return []
            out += found
        elif not isinstance(st, ast.Pass):
            return []
    return out


def no_sync_around_backward_only(ctx) -> list[ast.Call]:
    """Backward calls inside ``with model.no_sync():`` blocks that hold only the backward: DDP decides in the
    forward whether the coming backward all-reduces, so a forward run outside the block syncs anyway (ClassyVision's
    ``run_optimizer``, fixed by moving no_sync around forward and backward). Files that wrap with
    DistributedDataParallel (or a project helper named for it) and not FSDP (whose no_sync acts in the backward)."""
    mod = ctx.mod
    names = {(qn or "").rsplit(".", 1)[-1] for _, qn in mod.calls}
    if "no_sync" not in mod.attrs or not (ctx.torch.wrapped or ctx.torch.helper_wrapped) or names & {
            "FullyShardedDataParallel", "fully_shard", "FSDP"}:
        return []
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.With) and any(_no_sync_item(mod, it.context_expr) for it in node.items):
            out += _backward_only(ctx.facts, node.body)[:1]
    return out
