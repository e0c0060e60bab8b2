"""What an open ``strategy.scope()`` has created and not yet mirrored; mirrored at its first use.

``tf.distribute`` mirrors a variable when it is created: its initial value is copied to every replica. A PyTorch
module registers a parameter first and initialises it afterwards (``nn.Linear`` registers ``torch.empty`` weights,
then ``reset_parameters()`` fills them), so a broadcast at registration would copy uninitialised memory. The scope
therefore records what is registered inside it (``torch.nn.modules.module.register_module_parameter_registration_
hook`` and its buffer and child siblings) and mirrors all of it, as one collective, at the first of:

- the first forward pass, with gradients enabled and tensor inputs, of a module that registered something (a
  forward pre-hook put first on that module; hooks that mirroring adds to the module -- FSDP2's, when a strategy
  shards it -- are run for this call too, since ``torch.nn.Module`` fixed this call's list of hooks before);
- a call that trains, evaluates or saves (``strategy.run``, ``allgpu.fit``/``evaluate``, checkpoint save and
  restore, ``strategy.compile``, an optimizer step): the strategy calls :meth:`ScopeRecord.mirror_now`;
- the exit of the outermost ``scope()``.

So training inside the ``with`` block, TensorFlow's documented pattern, trains mirrored parameters, and layers built
later in the same or a new scope are mirrored at their own first use. Every replica builds the same modules in the
same order (SPMD), so every replica reaches the same first use and mirroring stays a collective they all join.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Callable, Iterator

import torch
from torch.nn.modules import module as nn_module
from torch.utils._pytree import tree_leaves

from allgpu.core.plain_pickle import pickle_plain

_OPEN: list["ScopeRecord"] = []  # records of the scopes open in this process, any strategy's


def open_records() -> list["ScopeRecord"]:
    """The records of every ``scope()`` open in the process (any strategy's): what they hold is not an unmirrored
    parameter for any strategy's check, since their first use mirrors it."""
    return list(_OPEN)


# Models that create their variables at their first call (a Keras model adopted by scope() or mirror() before it
# was built): module -> weak method mirroring what it has built, run at its first training forward.
_BUILT_LATER: "weakref.WeakKeyDictionary[torch.nn.Module, weakref.WeakMethod]" = weakref.WeakKeyDictionary()


def mirror_when_built(module: torch.nn.Module, mirror_built) -> None:
    """Have ``mirror_built()`` (a bound method; a collective) mirror what ``module`` built by the time of its first
    forward with gradients enabled: a lazily built Keras model's variables are created at its first call, after the
    scope that adopted it closed, and ``tf.distribute`` mirrors them like those of a model built in the scope."""
    _BUILT_LATER[module] = weakref.WeakMethod(mirror_built)


def mirror_built_later(module: torch.nn.Module) -> None:
    """Run ``module``'s :func:`mirror_when_built` method, if it has one (every replica reaches the same call)."""
    ref = _BUILT_LATER.get(module)
    method = ref() if ref is not None else None
    if method is not None:
        method()


#: ``mirror(params, buffers, roots, late)``: the strategy's mirroring (a collective). ``roots`` are the recorded
#: modules no recorded module holds as a child, in creation order; ``late`` is True when gradients were already
#: computed without synchronisation (an optimizer step was the first use), so the strategy averages them too.
MirrorFn = Callable[[list, list, list, bool], None]


class ScopeRecord:
    """The parameters, buffers and modules registered while recording, held (strongly) until mirrored.

    Args:
        mirror: the strategy's mirroring, called by :meth:`mirror_now` with what was recorded since the last call.
        first_use: the forward pre-hook put on each recording module, ``fn(module, args, kwargs)``; by default
            :meth:`first_use`.
    """

    def __init__(self, mirror: MirrorFn, first_use: Callable | None = None):
        self._mirror = mirror
        self._hook = first_use or self.first_use
        self.params: list[torch.Tensor] = []
        self.buffers: list[torch.Tensor] = []
        self._ids: set[int] = set()
        self._modules: dict[int, torch.nn.Module] = {}  # id -> module, in registration order
        self._children: set[int] = set()
        self._first_use: dict[int, object] = {}  # id(module) -> handle of its first-use hook
        self._registration: list = []
        self._paused = False

    # -- recording ---------------------------------------------------------------------------------------------
    def __enter__(self) -> "ScopeRecord":
        _OPEN.append(self)
        self._registration = [
            nn_module.register_module_parameter_registration_hook(self._on_param),
            nn_module.register_module_buffer_registration_hook(self._on_buffer),
            nn_module.register_module_module_registration_hook(self._on_child),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._registration:
            handle.remove()
        self._registration = []

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside (what mirroring itself registers, such as FSDP2's sharded parameters)."""
        previous, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = previous

    def _on_param(self, module, name, param):
        if param is not None and not self._paused:
            self._add(self.params, param)
            self._watch(module)

    def _on_buffer(self, module, name, buffer):
        if buffer is not None and not self._paused:
            self._add(self.buffers, buffer)
            self._watch(module)

    def _on_child(self, module, name, child):
        if child is not None and not self._paused:
            self._watch(module)
            self._children.add(id(child))

    def _add(self, into: list, tensor: torch.Tensor) -> None:
        if id(tensor) not in self._ids:
            self._ids.add(id(tensor))
            into.append(tensor)

    def _watch(self, module: torch.nn.Module) -> None:
        key = id(module)
        self._modules.setdefault(key, module)
        if key not in self._first_use:
            self._first_use[key] = module.register_forward_pre_hook(self._hook, prepend=True, with_kwargs=True)
            pickle_plain(module)  # torch.save(model) inside the scope: without the hook

    # -- questions ---------------------------------------------------------------------------------------------
    @property
    def pending(self) -> bool:
        """True while something recorded is not yet mirrored."""
        return bool(self._modules or self.params or self.buffers)

    def holds(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` was recorded and is not yet mirrored (the record keeps it alive: ids are unique)."""
        return id(tensor) in self._ids

    def watches(self, module: torch.nn.Module) -> bool:
        """True when ``module`` carries a first-use hook (it registered something while recording)."""
        return id(module) in self._first_use

    # -- mirroring ---------------------------------------------------------------------------------------------
    def mirror_now(self, late: bool = False) -> None:
        """Mirror everything recorded and not yet mirrored (a collective when anything is pending), then forget
        it; the first-use hooks are removed. Recording is paused meanwhile."""
        if not self.pending:
            return
        params, buffers = self.params, self.buffers
        roots = [m for key, m in self._modules.items() if key not in self._children]
        for handle in self._first_use.values():
            handle.remove()
        self.params, self.buffers, self._ids = [], [], set()
        self._modules, self._children, self._first_use = {}, set(), {}
        with self.paused():
            self._mirror(params, buffers, roots, late)

    def first_use(self, module: torch.nn.Module, args: tuple, kwargs: dict):
        """Forward pre-hook: at a training forward (gradients enabled, tensor inputs), mirror what is pending and
        run the pre-hooks mirroring added to ``module``. Returns the (possibly changed) ``(args, kwargs)``."""
        if torch.compiler.is_compiling() or not torch.is_grad_enabled() or not self.pending:
            return None
        if not any(isinstance(leaf, torch.Tensor) for leaf in tree_leaves((args, kwargs))):
            return None  # a symbolic call (Keras building a model from KerasTensors), not training
        before = set(module._forward_pre_hooks)
        self.mirror_now()
        added = [(key, hook) for key, hook in module._forward_pre_hooks.items() if key not in before]
        for key, hook in added:
            if key in module._forward_pre_hooks_with_kwargs:
                result = hook(module, args, kwargs)
                if result is not None:
                    args, kwargs = result
            else:
                result = hook(module, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        return args, kwargs

    def close(self) -> None:
        """Stop recording and remove the first-use hooks, mirroring nothing (a scope left by an exception)."""
        self.__exit__()
        if self in _OPEN:
            _OPEN.remove(self)
        for handle in self._first_use.values():
            handle.remove()
        self.params, self.buffers, self._ids = [], [], set()
        self._modules, self._children, self._first_use = {}, set(), {}
