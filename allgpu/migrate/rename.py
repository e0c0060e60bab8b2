"""The migration pass: TensorFlow names to allgpu's and Keras 3's, the tape step, ``@tf.function``, imports.

One LibCST transformer over the original tree, so every note carries the original line. What it cannot convert
it leaves as it is and records (``leftovers``) with the reason from :mod:`allgpu.migrate.names`.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import PositionProvider

from allgpu.migrate import keras_api, model_build, names, ops, reset_states, tape
from allgpu.migrate.cst import assigned_name, code, dotted, expr, qualify
from allgpu.migrate.notes import CHANGED, KEPT, NOT_CONVERTED, Note
from allgpu.migrate.scope_fix import insert_mirrors, keras_model_call
from allgpu.migrate.strategy_args import convert_strategy_call


class Rename(cst.CSTTransformer):
    """Rewrites one module. After ``module.visit(...)``: ``notes`` (changes), ``leftovers`` (line, col) ->
    (qualified name, line) of TensorFlow names left in place, ``models`` (Keras models built outside a scope)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, aliases: dict[str, str], taken: set[str], strategy: tuple[str, int] | None = None, *,
                 distributed: bool = False):
        super().__init__()
        self.strategy = strategy  # (name, line) of the script's only strategy, if it has exactly one
        self.distributed = distributed  # the script makes a tf.distribute strategy
        self.input_functions: set[str] = set()  # functions given to a pipeline's .map(): tf.data input code
        self.tf_checkpoints = False  # the script uses tf.train.Checkpoint / CheckpointManager
        self.resets: dict[str, str | None] | None = None  # reset_states.receivers(): what each name holds
        self.fixed: set[int] = set()  # lines of the models mirrored
        self.aliases = aliases
        self.taken = taken
        self.notes: list[Note] = []
        self.leftovers: dict[tuple[int, int], tuple[str, int]] = {}
        self.kept_line: int | None = None
        self.uses_torch = False
        self._tf_data_depth = 0
        self._chains: set[int] = set()  # id() of the outermost chain nodes being handled whole
        self._scopes = 0     # open `with <strategy>.scope():` blocks
        self._pinned = 0     # open `with tf.device(...):` blocks: their raw ops are left as they are
        self._functions = 0  # open def/class bodies: a model built there may be called inside a scope
        self._guards = 0     # open `if` blocks testing the replica (`if strategy.is_chief:`, `if rank == 0:`)
        self.models: dict[int, str] = {}  # line -> name: Keras models built outside any scope
        self.in_functions: set[int] = set()  # the lines of those built inside a def

    # -- helpers ------------------------------------------------------------------------------------------------
    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _where(self, node: cst.CSTNode) -> tuple[int, int]:
        start = self.get_metadata(PositionProvider, node).start
        return start.line, start.column

    def note(self, node: cst.CSTNode, kind: str, message: str) -> None:
        self.notes.append(Note(self._line(node), kind, message))

    # -- names ----------------------------------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if node.attr.value in names.KERAS2_ATTRIBUTES and self.aliases:
            self.note(node, NOT_CONVERTED, f"`.{node.attr.value}`: {names.KERAS2_ATTRIBUTES[node.attr.value]}")
        if isinstance(node.value, cst.Attribute) and node.value.attr.value == "extended" and self.aliases:
            member = node.attr.value
            if member not in names.EXTENDED_MEMBERS:
                why = names.EXTENDED_WHY.get(member) or names.EXTENDED_WHY["_" if member.startswith("_") else ""]
                self.note(node, NOT_CONVERTED, f"`.extended.{member}`: {why}")
        if qualify(dotted(node), self.aliases):
            self._chains.add(id(node))
            return False  # the whole chain is handled in leave_Attribute
        return True

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if id(original) not in self._chains:
            return updated
        return self._chain(original, updated)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if original.value in self.aliases:  # the module itself, passed along or called
            self._leftover(original, self.aliases[original.value])
        return updated

    def visit_Import(self, node: cst.Import) -> bool:
        return False  # its names are bindings, not uses

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def _chain(self, original: cst.CSTNode, updated: cst.BaseExpression) -> cst.BaseExpression:
        text = dotted(original)
        qualified = qualify(text, self.aliases)
        parts = qualified.split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix with a direct equivalent
            prefix = ".".join(parts[:cut])
            if prefix == "tensorflow.train.latest_checkpoint" and not self.tf_checkpoints:
                break  # it finds tf.train.Checkpoint files; without one it looks for Keras' weights: not ours
            if prefix in names.RENAMES and not self._missing_in_keras3(qualified):
                target = ".".join([names.RENAMES[prefix], *parts[cut:]])
                if names.RENAMES[prefix].split(".")[0] == "keras" and keras_api.exists(target) is False:
                    break  # a Keras 2 name Keras 3 dropped: rewriting it would only move the failure
                if names.RENAMES[prefix] not in names.STRATEGY_ARGS:  # strategies are noted where they are called
                    why = names.RENAME_WHY.get(prefix)
                    self.note(original, CHANGED, f"{text} -> {target}" + (f": {why}" if why else ""))
                return expr(target)
        self._leftover(original, qualified)
        return updated

    @staticmethod
    def _missing_in_keras3(qualified: str) -> bool:
        return any(qualified == p or qualified.startswith(p + ".") for p in names.KERAS3_MISSING)

    def _leftover(self, node: cst.CSTNode, qualified: str) -> None:
        if any(qualified == p or qualified.startswith(p + ".") for p in names.KEPT_PREFIXES):
            if self.kept_line is None:
                self.kept_line = self._line(node)
                self.note(node, KEPT, names.KEPT_NOTE)
            return
        if self._tf_data_depth:
            return  # builds a tf.data pipeline's input: TensorFlow runs it, as before
        self.leftovers[self._where(node)] = (qualified, self._line(node))

    # -- calls: tf.data arguments, strategy constructors --------------------------------------------------------
    def _is_tf_data(self, node: cst.BaseExpression) -> bool:
        while isinstance(node, (cst.Call, cst.Attribute, cst.Subscript)):
            qualified = qualify(dotted(node), self.aliases) if isinstance(node, cst.Attribute) else None
            if qualified and qualified.startswith("tensorflow.data"):
                return True
            node = node.func if isinstance(node, cst.Call) else node.value
        return False

    def _builds_input(self, call: cst.Call) -> bool:
        """A tf.data call, or ``.map(...)``-like on any pipeline: its arguments run inside TensorFlow's input."""
        return self._is_tf_data(call.func) or (isinstance(call.func, cst.Attribute)
                                               and call.func.attr.value in names.PIPELINE_METHODS)

    def visit_Call(self, node: cst.Call) -> None:
        self._tf_data_depth += self._builds_input(node)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        self._tf_data_depth -= self._builds_input(original)
        if self.distributed:
            self._batch_note(original)
            if dotted(original.func) == "print" and not self._guards:
                self.note(original, KEPT, names.PRINT_NOTE)
        if self.resets is not None and reset_states.is_reset_states(updated):
            return self._reset_states(original, updated)
        if self.aliases and _len_of_worker_devices(updated):
            strategy = updated.args[0].value.value.value
            self.note(original, CHANGED, f"{code(original)} -> {code(strategy)}.num_replicas_in_sync: "
                      f"{names.WORKER_DEVICES_WHY}")
            return cst.Attribute(value=strategy, attr=cst.Name("num_replicas_in_sync"))
        qualified = qualify(dotted(original.func), self.aliases)
        if qualified in names.NONE_CALLS:
            self._forget(original, notes=True)
            self.note(original, CHANGED, f"{dotted(original.func)}(...) -> None ({names.NONE_CALLS[qualified]})")
            return cst.Name("None")
        target = dotted(updated.func)
        op = ops.twin(qualify(target, self.aliases), original) if not (self._tf_data_depth or self._pinned) else None
        if op:  # a raw op with a keras.ops twin: the same arguments, on the model's torch tensors
            self.leftovers.pop(self._where(original.func), None)
            self.note(original, CHANGED, f"{target} -> {op} (the same arguments; it runs on PyTorch tensors)")
            return updated.with_changes(func=expr(op))
        if target in names.POSITIONAL_LIMIT and dotted(original.func) != target:
            return self._limited(original, updated, target)
        if target not in names.STRATEGY_ARGS or dotted(original.func) == target:
            return updated
        converted, messages, refused, dropped = convert_strategy_call(updated, target)
        source = dotted(original.func)
        if refused:  # the call stays whole, TensorFlow names and all: this one note stands for everything in it
            self._forget(original, notes=True)
            self.note(original, NOT_CONVERTED, f"{source}(...) left as it is: {refused}")
            return original
        for i in dropped:
            self._forget(original.args[i])
        why = [names.RENAME_WHY[target]] if target in names.RENAME_WHY else []
        self.note(original, CHANGED, "; ".join([f"{source}(...) -> {target}(...)", *messages, *why]))
        return converted

    def visit_If(self, node: cst.If) -> None:
        self._guards += _tests_replica(node)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self._guards -= _tests_replica(original)
        return updated

    def _reset_states(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """Keras 2's ``X.reset_states()``: ``X.reset_state()`` for a metric or an RNN layer, else reported."""
        call, receiver, why = reset_states.rewrite(updated, self.resets)
        if why:
            self.note(original, NOT_CONVERTED, f"{receiver}.reset_states(): {why}")
        else:
            self.note(original, CHANGED, f"{receiver}.reset_states() -> {receiver}.reset_state() (Keras 3's name)")
        return call

    def _batch_note(self, call: cst.Call) -> None:
        """A constant batch size stays the global batch (its meaning in tf.distribute and in allgpu): say so."""
        if not isinstance(call.func, cst.Attribute):
            return
        method = call.func.attr.value
        size = next((a.value for a in call.args if a.keyword and a.keyword.value == "batch_size"), None) \
            if method == "fit" else (call.args[0].value if method == "batch" and call.args else None)
        if isinstance(size, cst.Integer):
            n = size.value
            spelled = f"fit(batch_size={n})" if method == "fit" else f".batch({n})"
            self.note(call, KEPT, f"{spelled}: {n} stays the global batch, as in tf.distribute (each of N "
                                  f"replicas gets {n}/N: the same training as before). If {n} was meant per device "
                                  f"(lint's TF007: each GPU is given {n}/N and idles), write "
                                  f"`{n} * strategy.num_replicas_in_sync`: a larger global batch, so a different "
                                  "training (scale the learning rate with it)")

    def _forget(self, node: cst.CSTNode, notes: bool = False) -> None:
        """Drop the leftovers (and with ``notes``, the changes) recorded inside ``node``: it was removed, or kept
        whole under one note."""
        where = self.get_metadata(PositionProvider, node)
        start, end = (where.start.line, where.start.column), (where.end.line, where.end.column)
        for key in [k for k in self.leftovers if start <= k <= end]:
            del self.leftovers[key]
        if notes:
            self.notes[:] = [n for n in self.notes if not (n.kind == CHANGED and start[0] <= n.line <= end[0])]

    def _limited(self, original: cst.Call, updated: cst.Call, target: str) -> cst.BaseExpression:
        """A renamed function whose positional parameters differ after the first few: those must be keywords."""
        limit = names.POSITIONAL_LIMIT[target]
        if sum(a.keyword is None for a in original.args) <= limit:
            return updated
        self.notes[:] = [n for n in self.notes if not (n.line == self._line(original) and target in n.message)]
        self.leftovers[self._where(original.func)] = (qualify(dotted(original.func), self.aliases), self._line(original))
        return original

    # -- statements: models outside a scope, @tf.function, the tape step, imports ----------------------------------
    def visit_With(self, node: cst.With) -> None:
        self._scopes += any(_is_scope(item.item) for item in node.items)
        self._pinned += self._pins_device(node)

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        self._scopes -= any(_is_scope(item.item) for item in original.items)
        self._pinned -= self._pins_device(original)
        return updated

    def _pins_device(self, node: cst.With) -> bool:
        """``with tf.device(...)``: TensorFlow device code, left whole (its ops stay TensorFlow's, each reported)."""
        return any(isinstance(i.item, cst.Call) and qualify(dotted(i.item.func), self.aliases) == "tensorflow.device"
                   for i in node.items)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._functions += 1

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._functions -= 1
        if model_build.needs_built(updated):
            self.note(original, NOT_CONVERTED, f"class {original.name.value}: {model_build.NOTE}")
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions += 1
        self._tf_data_depth += node.name.value in self.input_functions  # given to .map(): TensorFlow runs it

    def leave_SimpleStatementLine(self, original, updated):
        pair = assigned_name(updated)
        if pair and not self._scopes and keras_model_call(pair[1]):
            self.models[self._line(original)] = pair[0]
            if self._functions:  # a builder called inside a scope, perhaps: fixed only beside the strategy
                self.in_functions.add(self._line(original))
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions -= 1
        self._tf_data_depth -= original.name.value in self.input_functions
        kept = []
        for old, new in zip(original.decorators, updated.decorators):
            deco = old.decorator
            bare = deco if not isinstance(deco, cst.Call) else (deco.func if _hints_only(deco) else None)
            if qualify(dotted(bare), self.aliases) == "tensorflow.function":
                self.leftovers.pop(self._where(bare), None)
                hints = f"; {', '.join(a.keyword.value for a in deco.args)} only steered its tracing" \
                    if isinstance(deco, cst.Call) and deco.args else ""
                self.note(old, CHANGED, f"@{dotted(bare)} removed: `{original.name.value}` runs eagerly on PyTorch "
                                        f"(the same results; tf.function only compiled it to a graph{hints}; "
                                        "strategy.compile / torch.compile compile it if you want)")
                continue
            kept.append(new)
        if len(kept) == len(updated.decorators):
            return updated
        leading = updated.decorators[0].leading_lines if updated.decorators else ()
        if kept:
            kept[0] = kept[0].with_changes(leading_lines=leading)
            return updated.with_changes(decorators=kept)
        return updated.with_changes(decorators=[], leading_lines=[*updated.leading_lines, *leading])

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._block(original.body, updated.body))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._block(original.body, updated.body))

    def _block(self, originals, updated) -> list[cst.BaseStatement]:
        lines = [self._line(s) for s in originals]
        body, lines = insert_mirrors(list(updated), lines, self.models, self.strategy, self.fixed)
        body, converted, _ = tape.rewrite_block(body, lines, self.aliases, self.taken)
        for line in converted:
            self.uses_torch = True
            self.notes.append(Note(line, CHANGED, "the tf.GradientTape step -> Keras 3's PyTorch-backend step "
                                                  "(zero_grad, loss.backward(), optimizer.apply(grads, weights) "
                                                  "under torch.no_grad(); gradients averaged across replicas "
                                                  "by backward())"))
            for key in [k for k, (q, _) in self.leftovers.items() if q == "tensorflow.GradientTape" and k[0] == line]:
                del self.leftovers[key]
        return body

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.BaseSmallStatement:
        module = dotted(original.module) if original.module is not None and not original.relative else None
        if module is None or not (module == "tensorflow" or module.startswith("tensorflow.")):
            return updated
        if module.startswith("tensorflow.keras") and not self._missing_in_keras3(module):
            target = "keras" + module[len("tensorflow.keras"):]
            dropped = [] if isinstance(original.names, cst.ImportStar) else [
                a.name.value for a in original.names if isinstance(a.name, cst.Name)
                and (self._missing_in_keras3(f"{module}.{a.name.value}")
                     or keras_api.exists(f"{target}.{a.name.value}") is False)]
            if dropped:  # rewriting the module would only move the ImportError into the migrated script
                self.note(original, NOT_CONVERTED, f"from {module} import {', '.join(dropped)}: "
                                                   f"{names.why_not(f'{module}.{dropped[0]}')}")
                return updated
            self.note(original, CHANGED, f"from {module} import ... -> from {target} import ...")
            return updated.with_changes(module=expr(target))
        imported = [] if isinstance(original.names, cst.ImportStar) else original.names
        if module == "tensorflow" and imported and all(a.name.value == "keras" for a in imported):
            self.note(original, CHANGED, "from tensorflow import keras -> import keras")
            return cst.Import(names=[cst.ImportAlias(name=cst.Name("keras"), asname=imported[0].asname)])
        self.note(original, NOT_CONVERTED, f"from {module} import ...: names imported from TensorFlow this way "
                                           "are not converted; import tensorflow as tf and use tf.<name>, or "
                                           "write the allgpu / keras name")
        return updated

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        aliases = []
        for alias in updated.names:
            name = dotted(alias.name) or ""
            if name.startswith("tensorflow.keras") and not self._missing_in_keras3(name) and alias.asname:
                target = "keras" + name[len("tensorflow.keras"):]
                self.note(original, CHANGED, f"import {name} -> import {target}")
                alias = alias.with_changes(name=expr(target))
            aliases.append(alias)
        return updated.with_changes(names=aliases)


def _hints_only(call: cst.Call) -> bool:
    """``@tf.function(...)`` given only arguments that steer tracing (``experimental_relax_shapes=True``...)."""
    return all(a.keyword is not None and a.keyword.value in names.TRACING_HINTS for a in call.args)


def _len_of_worker_devices(call: cst.Call) -> bool:
    """``len(<strategy>.extended.worker_devices)``: TensorFlow's local replica count."""
    if dotted(call.func) != "len" or len(call.args) != 1:
        return False
    arg = call.args[0].value
    return (isinstance(arg, cst.Attribute) and arg.attr.value == "worker_devices"
            and isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "extended")


def _tests_replica(node: cst.If) -> bool:
    test = code(node.test)
    return any(word in test for word in ("is_chief", "rank", "replica_id", "task_id", "task_type"))


def _is_scope(node: cst.BaseExpression) -> bool:
    """``<anything>.scope()``: a strategy's scope, TensorFlow's or allgpu's."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "scope"


def script_facts(module: cst.Module, aliases: dict[str, str]) -> tuple[set[str], bool]:
    """``(input functions, tf checkpoints)``: the names of functions given to a pipeline's ``.map(...)``-like
    methods, and whether the script uses ``tf.train.Checkpoint`` or ``CheckpointManager``."""
    functions: set[str] = set()
    checkpoints = []

    class _Facts(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in names.PIPELINE_METHODS:
                functions.update(a.value.value for a in node.args[:1] if isinstance(a.value, cst.Name))

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if qualify(dotted(node), aliases) in ("tensorflow.train.Checkpoint", "tensorflow.train.CheckpointManager"):
                checkpoints.append(node)

    module.visit(_Facts())
    return functions, bool(checkpoints)
