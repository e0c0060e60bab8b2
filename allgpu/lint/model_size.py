"""How many parameters does a script's model have, read from its source alone (for rule AG003)?

Two readings, each a *lower bound* (what cannot be read counts as nothing, so a model is never made larger than
its source says):

* a pretrained checkpoint whose name states its size: ``from_pretrained("meta-llama/Llama-2-7b-hf")`` -> 7e9
  (``7b``, ``1.3B``, ``8x7B`` -> 56e9, ``7b1`` -> 7.1e9), the name a literal, a module constant or an argparse
  ``default=``;
* layers with sizes the file spells out: ``nn.Linear``, ``nn.Embedding``, ``nn.Conv1d/2d/3d`` with int literals,
  module-level int constants, ``__init__`` defaults, constructor arguments, fields of a local config class
  (``GPT(GPTConfig(n_layer=48))``) and arithmetic on them, through the local ``nn.Module`` classes they build,
  times repeats (``[Block() for _ in range(N)]``, ``for _ in range(N): self.layers.append(Block())``).

Nothing is imported or run.
"""

from __future__ import annotations

import ast
import math
import operator
import re

from allgpu.lint.astutil import const_str, kwarg
from allgpu.lint.resolve import Module

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Pow: operator.pow}
_SIZE = re.compile(r"(?i)(?:^|[-_/.])(?:(\d+)x)?(\d+(?:\.\d+)?)b(\d)?(?=$|[-_/.])")
_MAX_DEPTH = 8  # local classes inside each other, or constants defined by constants
_CONV = {"torch.nn.Conv1d": 1, "torch.nn.Conv2d": 2, "torch.nn.Conv3d": 3}


def size_in_name(name: str) -> float | None:
    """Parameters a checkpoint name states: ``"Llama-2-13b-hf"`` -> 13e9, ``"Mixtral-8x7B"`` -> 56e9; None."""
    found = [m for m in _SIZE.finditer(name)]
    if not found:
        return None
    experts, billions, tenth = found[-1].groups()
    value = float(billions) + (int(tenth) / 10 if tenth else 0.0)
    return value * (int(experts) if experts else 1) * 1e9


class ParamCounter:
    """Lower bounds on the parameters that expressions of one module build."""

    def __init__(self, mod: Module):
        self.mod = mod
        self.embeddings: list[int] = []  # sizes of the embeddings counted, for weight tying

    # ---- values -----------------------------------------------------------------------------------------------
    def value(self, node: ast.AST | None, env: dict, depth: int = 0):
        """An int, a dict (a config object's fields) or None when the source does not say."""
        if node is None or depth > _MAX_DEPTH:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, int) and not isinstance(node.value, bool) else None
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return self._module_constant(node, depth)
        if isinstance(node, ast.Attribute):
            base = self.value(node.value, env, depth)
            return base.get(node.attr) if isinstance(base, dict) else None
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = self.value(node.left, env, depth), self.value(node.right, env, depth)
            if isinstance(a, int) and isinstance(b, int) and (not isinstance(node.op, ast.Pow) or 0 <= b <= 64):
                return _OPS[type(node.op)](a, b) if not (isinstance(node.op, ast.FloorDiv) and b == 0) else None
            return None
        if isinstance(node, ast.Call):
            cls = self.mod.local_class(node.func)
            return self._config(cls, node, env, depth) if cls is not None and not self._is_module(cls) else None
        return None

    def _module_constant(self, node: ast.Name, depth: int):
        values = self.mod.values_of(node)
        if len(values) != 1 or node.id in self.mod.augassigned:
            return None
        return self.value(values[0], {}, depth + 1)

    def _config(self, cls: ast.ClassDef, call: ast.Call, env: dict, depth: int) -> dict:
        """A config class's fields: class-level defaults (``n_layer: int = 12``), overridden by the call's keywords."""
        fields: dict = {}
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                fields[stmt.target.id] = self.value(stmt.value, {}, depth + 1)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                fields[stmt.targets[0].id] = self.value(stmt.value, {}, depth + 1)
        names = list(fields)
        for name, arg in zip(names, call.args):
            fields[name] = self.value(arg, env, depth + 1)
        for kw in call.keywords:
            if kw.arg:
                fields[kw.arg] = self.value(kw.value, env, depth + 1)
        return fields

    def _is_module(self, cls: ast.ClassDef) -> bool:
        return any(b.startswith("torch.nn.") for b in self.mod.class_bases(cls))

    # ---- parameters -------------------------------------------------------------------------------------------
    def params(self, node: ast.AST | None, env: dict | None = None, depth: int = 0) -> int:
        """Parameters the expression ``node`` builds (0 when the source does not say)."""
        env = env if env is not None else {}
        if node is None or depth > _MAX_DEPTH:
            return 0
        if isinstance(node, ast.Call):
            return self._call_params(node, env, depth)
        if isinstance(node, (ast.List, ast.Tuple)):
            return sum(self.params(e, env, depth) for e in node.elts)
        if isinstance(node, ast.Dict):
            return sum(self.params(v, env, depth) for v in node.values)
        if isinstance(node, ast.Starred):
            return self.params(node.value, env, depth)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
            return self._repeats(node.generators[0].iter, env, depth) * self.params(node.elt, env, depth)
        return 0

    def _repeats(self, it: ast.expr, env: dict, depth: int) -> int:
        """N for ``range(N)`` when N is known, else 1 (at least one pass: a lower bound)."""
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
            n = self.value(it.args[0], env, 0)
            return n if isinstance(n, int) and n > 0 else 1
        return 1

    def _call_params(self, call: ast.Call, env: dict, depth: int) -> int:
        qn = self.mod.qualname(call.func) or ""
        arg = lambda i, name: self.value(call.args[i] if len(call.args) > i else kwarg(call, name), env, 0)  # noqa: E731
        given = kwarg(call, "bias")  # only a literal True (or none) counts a bias: a lower bound
        bias = given is None or (isinstance(given, ast.Constant) and given.value is True)
        if qn == "torch.nn.Linear":
            i, o = arg(0, "in_features"), arg(1, "out_features")
            return i * o + (o if bias else 0) if _ints(i, o) else 0
        if qn == "torch.nn.Embedding":
            n, d = arg(0, "num_embeddings"), arg(1, "embedding_dim")
            if not _ints(n, d):
                return 0
            self.embeddings.append(n * d)
            return n * d
        if qn in _CONV:
            i, o, k = arg(0, "in_channels"), arg(1, "out_channels"), self._kernel(call, env, depth, _CONV[qn])
            groups = arg(6, "groups") or 1
            return i // groups * o * k + (o if bias else 0) if _ints(i, o, k, groups) and groups > 0 else 0
        if qn in ("torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"):
            return sum(self.params(a, env, depth) for a in call.args)
        if isinstance(call.func, ast.Name) and call.func.id == "dict":  # ModuleDict(dict(wte=..., h=...))
            return sum(self.params(kw.value, env, depth) for kw in call.keywords)
        cls = self.mod.local_class(call.func)
        if cls is not None and self._is_module(cls):
            return self._class_params(cls, call, env, depth + 1)
        return 0

    def _kernel(self, call: ast.Call, env: dict, depth: int, dims: int) -> int | None:
        node = call.args[2] if len(call.args) > 2 else kwarg(call, "kernel_size")
        if isinstance(node, (ast.Tuple, ast.List)):
            sizes = [self.value(e, env, 0) for e in node.elts]
            return math.prod(sizes) if _ints(*sizes) else None
        k = self.value(node, env, 0)
        return k ** dims if isinstance(k, int) else None

    def _class_params(self, cls: ast.ClassDef, call: ast.Call, outer: dict, depth: int) -> int:
        init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is None:
            return 0
        env = self._bind(init, call, outer, depth)
        return max(0, self._body_params(init.body, env, depth))

    def _bind(self, init: ast.FunctionDef, call: ast.Call, outer: dict, depth: int) -> dict:
        """``__init__``'s parameters: defaults, then the call's arguments, as values (``self`` a namespace)."""
        params = init.args.args[1:]
        env: dict = {"self": {}}
        defaults = init.args.defaults
        for p, d in zip(params[len(params) - len(defaults):], defaults):
            env[p.arg] = self.value(d, {}, 0)
        for p, a in zip(params, call.args):
            env[p.arg] = self.value(a, outer, 0)
        for kw in call.keywords:
            if kw.arg:
                env[kw.arg] = self.value(kw.value, outer, 0)
        return env

    def _body_params(self, body: list[ast.stmt], env: dict, depth: int) -> int:
        total = 0
        for stmt in body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
                val = self.value(value, env, 0)
                if isinstance(target, ast.Name):
                    env[target.id] = val
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    env["self"][target.attr] = val
                total += self.params(value, env, depth)
                if _is_tie(target, value) and self.embeddings:  # ``wte.weight = lm_head.weight``: one tensor
                    total -= max(self.embeddings)
            elif isinstance(stmt, ast.If):  # either branch may run: the smaller one is certain
                total += min(self._body_params(stmt.body, dict(env), depth),
                             self._body_params(stmt.orelse, dict(env), depth))
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                f = stmt.value.func
                if isinstance(f, ast.Attribute) and f.attr in ("append", "add_module", "extend"):
                    total += sum(self.params(a, env, depth) for a in stmt.value.args)
            elif isinstance(stmt, ast.For):
                total += self._repeats(stmt.iter, env, depth) * self._body_params(stmt.body, dict(env), depth)
        return total


def _is_tie(target: ast.expr, value: ast.expr) -> bool:
    return (isinstance(target, ast.Attribute) and target.attr == "weight" and isinstance(value, ast.Attribute)
            and value.attr == "weight")


def _ints(*values) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def pretrained_name(mod: Module, call: ast.Call) -> str | None:
    """The checkpoint name a ``from_pretrained`` call loads, when the file says it: a literal, a module
    constant, or the ``default=`` of the argparse option ``args.X`` reads."""
    node = call.args[0] if call.args else kwarg(call, "pretrained_model_name_or_path")
    if node is None:
        return None
    text = const_str(node)
    if text is None and isinstance(node, ast.Name):
        values = mod.values_of(node)
        text = const_str(values[0]) if len(values) == 1 else None
    if text is None and isinstance(node, ast.Attribute):
        text = _argparse_default(mod, node.attr)
    return text


def _argparse_default(mod: Module, dest: str) -> str | None:
    for call, _ in mod.calls:
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "add_argument"):
            continue
        flags = [const_str(a) or "" for a in call.args]
        names = {fl.lstrip("-").replace("-", "_") for fl in flags}
        explicit = const_str(kwarg(call, "dest"))
        if dest in names or dest == explicit:
            return const_str(kwarg(call, "default"))
    return None
