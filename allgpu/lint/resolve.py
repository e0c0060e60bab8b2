"""Name resolution for one parsed file: imports and aliases, simple assignments, local functions and classes.

The checker never imports the user's code; everything here reads the ``ast`` only. ``qualname`` turns
``tf.keras.layers.Dense`` (after ``import tensorflow as tf``) into ``keras.layers.Dense`` and ``DDP`` (after
``from torch.nn.parallel import DistributedDataParallel as DDP``) into
``torch.nn.parallel.DistributedDataParallel``; ``tensorflow.keras``, ``tf_keras`` and ``keras`` are one name.
"""

from __future__ import annotations

import ast
import bisect
from functools import cached_property

from allgpu.lint.astutil import (const_str, dotted, has_star_kwargs, iter_body_nodes, kwarg,  # noqa: F401
                                 literal_text)  # re-exported: rules import them from here

# What Module's single pass indexes, by node class. "watch": nodes that can make ``compile()`` refuse a tree
# ``ast.parse`` accepted (see compile_check.py).
_KINDS: dict[type, str] = {
    ast.Call: "call", ast.Attribute: "attr", ast.For: "loop", ast.AsyncFor: "loop", ast.While: "loop",
    ast.Name: "name", ast.Import: "import", ast.ImportFrom: "from", ast.Assign: "assign", ast.AnnAssign: "assign",
    ast.withitem: "with", ast.FunctionDef: "def", ast.AsyncFunctionDef: "def", ast.ClassDef: "class",
    ast.AugAssign: "aug",
    **{t: "watch" for t in (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await,
                            ast.Nonlocal, ast.Global, ast.Starred)},
}

_PREFIXES = (
    ("tensorflow.compat.v1.", "tensorflow."),
    ("tensorflow.compat.v2.", "tensorflow."),
    ("tensorflow.python.keras.", "keras."),
    # tf.data by TensorFlow's own module paths, as libraries built on it import it (``dataset_ops.Dataset``)
    ("tensorflow.python.data.ops.dataset_ops.", "tensorflow.data."),
    ("tensorflow.python.data.ops.readers.", "tensorflow.data."),
    ("tensorflow.python.data.experimental.ops.readers.", "tensorflow.data.experimental."),
    ("tensorflow.keras.", "keras."),
    ("tf_keras.", "keras."),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.nn.parallel.data_parallel.", "torch.nn.parallel."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
    ("torch.utils.data.distributed.", "torch.utils.data."),
    ("torch.nn.modules.batchnorm.", "torch.nn."),
    ("torch.nn.parallel.DataParallel", "torch.nn.DataParallel"),
    ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.DistributedDataParallel"),
)


# Names a ``from header import *`` brings by the libraries' own conventions (the header is not read).
_STAR_CONVENTIONS = {"torch": "torch", "deepspeed": "deepspeed", "tf": "tensorflow", "tensorflow": "tensorflow",
                     "dist": "torch.distributed", "nn": "torch.nn"}


def normalise(name: str) -> str:
    """Map spellings of one API onto one name (``tensorflow.keras.X`` -> ``keras.X``)."""
    name_dot = name + "."
    for old, new in _PREFIXES:
        if name_dot.startswith(old) or name == old:
            rest = name_dot[len(old):-1] if name_dot.startswith(old) else ""
            new = new.rstrip(".")
            return f"{new}.{rest}" if rest else new
    return name


def _linked_nodes(tree: ast.AST, parent: dict[int, ast.AST]):
    """Every node under ``tree`` (``tree`` first), recording ``parent[id(child)] = node`` on the way: one pass for
    parent links and indexes (``ast.walk`` + ``iter_child_nodes`` costs twice as much)."""
    AST = ast.AST
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for fname in node._fields:
            if fname == "ctx":  # Load/Store/Del markers: nothing to index, a third of all nodes
                continue
            value = getattr(node, fname, None)
            if type(value) is list:
                for child in value:
                    if isinstance(child, AST):
                        parent[id(child)] = node
                        stack.append(child)
            elif isinstance(value, AST):
                parent[id(value)] = node
                stack.append(value)
        yield node


class Module:
    """One parsed file with its import table, assignments, definitions and parent links.

    Attributes:
        tree: the ``ast.Module``.
        source: the text that was parsed.
        aliases: local name -> normalised qualified name bound by an import.
        assigns: dotted target (``"model"``, ``"self.model"``) -> every value assigned to it, in file order.
        functions: function name -> its definitions (methods included).
        classes: class name -> its definitions.
        calls: every ``ast.Call`` with the normalised qualified name of what it calls (or None).
    """

    def __init__(self, tree: ast.Module, source: str, importer=None):
        self.tree = tree
        self.source = source
        # Sibling modules of the project (allgpu.lint.project.Importer); their nodes are "foreign": rules follow
        # their functions but never report at their lines.
        self.importer = importer
        self._foreign: list[Module] = []
        self.aliases: dict[str, str] = {}
        self.assigns: dict[str, list[ast.expr]] = {}
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.classes: dict[str, list[ast.ClassDef]] = {}
        self.parent: dict[int, ast.AST] = {}
        self.attrs: dict[str, list[ast.Attribute]] = {}
        self.name_ids: set[str] = set()
        self.name_nodes: dict[str, list[ast.Name]] = {}  # every bare-name node, by name
        self.loops: list[ast.For | ast.AsyncFor | ast.While] = []
        self.subscript_assigns: list[tuple[ast.Subscript, ast.expr]] = []
        self.compile_watch: list[ast.AST] = []  # the rare nodes compile_check looks at
        self.augassigned: set[str | None] = set()  # targets of ``x += ...``: names that are not constants
        all_calls: list[ast.Call] = []
        for node in _linked_nodes(tree, self.parent):
            kind = _KINDS.get(type(node))  # one dict lookup instead of a chain of isinstance tests
            if kind is None:
                continue
            if kind == "call":
                all_calls.append(node)
            elif kind == "attr":
                self.attrs.setdefault(node.attr, []).append(node)
            elif kind == "loop":
                self.loops.append(node)
            elif kind == "name":
                self.name_ids.add(node.id)
                self.name_nodes.setdefault(node.id, []).append(node)
            elif kind in ("import", "from"):
                self._index_import(node)
            elif kind == "assign":
                if node.value is not None:
                    self._index_assign(node)
            elif kind == "with":
                if node.optional_vars is not None:
                    key = dotted(node.optional_vars)
                    if key:
                        self.assigns.setdefault(key, []).append(node.context_expr)
            elif kind == "def":
                self.functions.setdefault(node.name, []).append(node)
            elif kind == "class":
                self.classes.setdefault(node.name, []).append(node)
            elif kind == "aug":
                self.augassigned.add(dotted(node.target))
            else:
                self.compile_watch.append(node)
        self._qn_cache: dict[int, str | None] = {}
        self.calls: list[tuple[ast.Call, str | None]] = [(c, self.qualname(c.func)) for c in all_calls]

    def _index_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                root = a.name.split(".")[0]
                self.aliases[a.asname or root] = normalise(a.name) if a.asname else root
        elif node.module and node.level == 0:
            for a in node.names:
                self.aliases[a.asname or a.name] = normalise(f"{node.module}.{a.name}")
        elif node.level:  # ``from .utils import f``: kept relative, for the project importer
            prefix = "." * node.level + (f"{node.module}." if node.module else "")
            for a in node.names:
                self.aliases.setdefault(a.asname or a.name, prefix + a.name)

    def _index_assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Subscript):
                self.subscript_assigns.append((t, node.value))
            if isinstance(t, (ast.Tuple, ast.List)):
                value = node.value
                # ``a, b = x, y``: each name gets its own element; otherwise the whole value
                pairs = (zip(t.elts, value.elts) if isinstance(value, (ast.Tuple, ast.List))
                         and len(value.elts) == len(t.elts) else ((e, value) for e in t.elts))
            else:
                pairs = ((t, node.value),)
            for sub, val in pairs:  # ``(ds_train, ds_test), info = tfds.load(...)``: nested names get the value too
                for key in map(dotted, sub.elts if isinstance(sub, (ast.Tuple, ast.List)) else (sub,)):
                    if key:
                        self.assigns.setdefault(key, []).append(val)

    # --- names -------------------------------------------------------------------------------------
    def qualname(self, node: ast.AST | None, _depth: int = 0) -> str | None:
        """Normalised qualified name of a name/attribute chain, through imports and module aliases."""
        if node is None or _depth > 4:
            return None
        if self._foreign and _depth == 0:
            owner = self.owner(node)
            if owner is not None:
                return owner.qualname(node)
        key = id(node)
        if _depth == 0 and key in self._qn_cache:
            return self._qn_cache[key]
        result = None
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                result = self.aliases[node.id]
            else:
                vals = self.assigns.get(node.id)
                # ``layers = tf.keras.layers``: one assignment of a name chain rooted in an import.
                if vals and len(vals) == 1 and isinstance(vals[0], (ast.Attribute, ast.Name)):
                    result = self.qualname(vals[0], _depth + 1)
                elif not vals and node.id in _STAR_CONVENTIONS and "*" in self.aliases:
                    result = _STAR_CONVENTIONS[node.id]  # ``from header import *`` where header imports torch
        elif isinstance(node, ast.Attribute):
            base = self.qualname(node.value, _depth + 1)
            result = normalise(f"{base}.{node.attr}") if base else None
        if _depth == 0:
            self._qn_cache[key] = result
        return result

    def values_of(self, node: ast.AST | None) -> list[ast.expr]:
        """Every value assigned to the name/attribute ``node`` names ([] when unknown)."""
        if self._foreign:
            owner = self.owner(node)
            if owner is not None:
                return owner.values_of(node)
        key = dotted(node)
        return self.assigns.get(key, []) if key else []

    # --- other modules of the project ----------------------------------------------------------------
    def owner(self, node: ast.AST) -> Module | None:
        """The adopted sibling module ``node`` belongs to, None for this file's own nodes."""
        for f in self._foreign:
            if id(node) in f.parent or node is f.tree:
                return f
        return None

    def is_foreign(self, node: ast.AST) -> bool:
        return bool(self._foreign) and self.owner(node) is not None

    def _imported(self, func: ast.expr, table: str) -> list:
        """Top-level functions (``table="functions"``) or classes a call names through a project import."""
        if self.importer is None:
            return []
        qn = self.qualname(func)
        if not qn or "." not in qn.lstrip("."):
            return []
        module, _, name = qn.rpartition(".")
        fm = self.importer.load(module)
        if fm is None:
            return []
        defs = [d for d in getattr(fm, table).get(name, []) if fm.parent.get(id(d)) is fm.tree]
        target = fm.aliases.get(name) if not defs and getattr(fm, "path", None) is not None else None
        if target and target.startswith(".") and "." in target.lstrip("."):
            # ``from .to_k_shot_dataset import ToKShotDataset`` in a package's ``__init__``: one re-export
            sub, _, name = target.rpartition(".")
            fm = type(self.importer)(fm.path).load(sub)
            if fm is None:
                return []
            defs = [d for d in getattr(fm, table).get(name, []) if fm.parent.get(id(d)) is fm.tree]
        if defs:
            self._adopt(fm)
        return defs[-1:]

    def _adopt(self, fm: Module) -> None:
        if any(f is fm for f in self._foreign):
            return
        self._foreign.append(fm)
        self.parent.update(fm.parent)
        if "calls_by_stmt" in self.__dict__:  # already handed out (flow holds it): extend it in place
            self.__dict__["calls_by_stmt"].update(fm.calls_by_stmt)

    def is_imported(self, prefix: str) -> bool:
        """True when some import binds a name under ``prefix`` (``"torch"``, ``"tensorflow"``)."""
        return any(q == prefix or q.startswith(prefix + ".") for q in self.aliases.values())

    # --- structure ---------------------------------------------------------------------------------
    def ancestors(self, node: ast.AST):
        """Parents of ``node`` from the nearest up to the module."""
        while id(node) in self.parent:
            node = self.parent[id(node)]
            yield node

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        cache = self.__dict__.setdefault("_enclosing_fn", {})
        key = id(node)
        if key not in cache:
            cache[key] = next((a for a in self.ancestors(node)
                               if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        return cache[key]

    def local_functions(self, func: ast.expr) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The definition in this file that ``func`` (``step``, ``self.step``) calls; [] when unknown.

        When a name is defined several times, the definition that binds it at the call is taken: for a method,
        the one in the caller's class; otherwise the last one above the call (else the first one below).
        Functions imported from the project's other modules are found too when an importer is set.
        """
        if self._foreign:
            owner = self.owner(func)
            if owner is not None:
                return owner.local_functions(func)
        if isinstance(func, ast.Name) and func.id in self.aliases:
            return self._imported(func, "functions")
        if isinstance(func, ast.Name) and func.id not in self.aliases:
            defs = self.functions.get(func.id, [])
            if not defs:
                # ``step = tf.function(train_step)`` or ``fn = train_step``
                for val in self.assigns.get(func.id, [])[:2]:
                    if isinstance(val, ast.Call) and val.args and isinstance(val.args[0], ast.Name):
                        defs = defs + self.functions.get(val.args[0].id, [])
                    elif isinstance(val, ast.Name) and val.id != func.id:
                        defs = defs + self.functions.get(val.id, [])
            return self._nearest(defs, func)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            defs = self.functions.get(func.attr, [])
            if len(defs) > 1:
                cls = next((a for a in self.ancestors(func) if isinstance(a, ast.ClassDef)), None)
                key = (func.attr, id(cls))
                cache = self.__dict__.setdefault("_method_cache", {})
                if key not in cache:
                    cache[key] = [d for d in defs if self.parent.get(id(d)) is cls] or defs
                defs = cache[key]
            return self._nearest(defs, func)
        if isinstance(func, ast.Attribute):  # ``helpers.build_model()``
            return self._imported(func, "functions")
        return []

    def _nearest(self, defs: list, node: ast.AST) -> list:
        if len(defs) <= 1:
            return defs
        # the last definition at or above the call, else the first one below: bisect over the sorted lines
        cache = self.__dict__.setdefault("_nearest_cache", {})
        entry = cache.get(id(defs))
        if entry is None or entry[0] is not defs:
            ordered = sorted(defs, key=lambda d: d.lineno)
            entry = cache[id(defs)] = (defs, [d.lineno for d in ordered], ordered)
        _, lines, ordered = entry
        i = bisect.bisect_right(lines, getattr(node, "lineno", 0))
        return [ordered[i - 1]] if i else [ordered[0]]

    def callers(self, fn: ast.AST) -> list[ast.Call]:
        """Calls in this file that resolve to ``fn``."""
        index = self.__dict__.get("_callers")
        if index is None:
            index = {}
            for call, qn in self.calls:
                if qn is None:
                    for d in self.local_functions(call.func):
                        index.setdefault(id(d), []).append(call)
            self.__dict__["_callers"] = index
        return index.get(id(fn), [])

    def local_class(self, func: ast.expr) -> ast.ClassDef | None:
        if self._foreign:
            owner = self.owner(func)
            if owner is not None:
                return owner.local_class(func)
        if isinstance(func, ast.Name) and func.id in self.classes and func.id not in self.aliases:
            return self.classes[func.id][0]
        if isinstance(func, (ast.Name, ast.Attribute)) and self.importer is not None:
            found = self._imported(func, "classes")
            if found:
                return found[0]
            if isinstance(func, ast.Name) and "*" in self.aliases and func.id not in self.aliases:
                return self._star_class(func.id)
        return None

    def _star_class(self, name: str) -> ast.ClassDef | None:
        """A class that ``from pkg.utils import *`` brings in from a module of the project (through one re-export
        in that package's ``__init__``)."""
        if not hasattr(self.importer, "find_def") or name in self.classes or not name[:1].isupper():
            return None
        found = self.importer.find_def(self.aliases["*"].rsplit(".", 1)[0], name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        self._adopt(found[0])
        return found[1]

    def class_bases(self, cls: ast.ClassDef, _seen: frozenset = frozenset()) -> set[str]:
        """Qualified names of ``cls``'s bases, through local base classes."""
        out: set[str] = set()
        for b in cls.bases:
            q = self.qualname(b)
            if q:
                out.add(q)
            local = self.local_class(b)
            if local is not None and local.name not in _seen:
                out |= self.class_bases(local, _seen | {cls.name})
        return out

    @cached_property
    def calls_by_stmt(self) -> dict[int, list[ast.Call]]:
        """id of a statement -> the calls in its own expressions (not in the statements nested in it)."""
        out: dict[int, list[ast.Call]] = {}
        for call, _ in self.calls:
            for anc in self.ancestors(call):
                if isinstance(anc, ast.stmt):
                    out.setdefault(id(anc), []).append(call)
                    break
        for f in self._foreign:
            out.update(f.calls_by_stmt)
        return out

    @cached_property
    def lines(self) -> list[str]:
        return self.source.splitlines()
