"""``model.load_state_dict(state, assign=True)`` on a model a strategy mirrored or sharded.

``assign=True`` (PyTorch's route for loading into a model built on the meta device; the FSDP2 example's
checkpointer loads so) replaces each parameter object with a new one. allgpu knows its mirrored parameters by
identity, so before this hook the next training step raised ``NotMirroredError`` ("created outside
strategy.scope()"), which the user had not done. Two load hooks (``nn.Module``'s public
``register_load_state_dict_pre_hook`` / ``_post_hook``, on the root module only) answer it:

* a mirrored parameter (``MirroredStrategy`` and the other strategies that keep a full copy) keeps its identity:
  the loaded values are copied into it and it is put back, as a load without ``assign`` does, so its gradient
  hooks, its place in optimizers and its device stay. Every replica loads its own copy, as without ``assign``.
* a sharded one (``FullyShardedStrategy``) is FSDP2's to swap: FSDP2's own post-hook (``reset_sharded_param``)
  adopts the new ``DTensor`` and reduce-scatters its gradients, so the new object is recorded as mirrored.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from allgpu.core.plain_pickle import pickle_plain


def watch_assign(root: nn.Module, keep: Callable[[torch.Tensor], bool], adopt: Callable[[list], None]) -> None:
    """Install the load hooks on ``root`` once.

    Args:
        keep: whether a replaced parameter is one to keep (mirrored by the caller's strategy).
        adopt: called with the new parameters left in place (the sharded case: ``keep`` says False for them);
            records them as mirrored.
    """
    if getattr(root, "_allgpu_assign_watch", False):
        return
    root._allgpu_assign_watch = True
    pickle_plain(root)  # torch.save(model) / deepcopy: without these closures
    before: dict[tuple[int, str], torch.Tensor] = {}  # held only during a load (old ones may have no other owner)

    def remember(*_args, **_kwargs) -> None:
        before.clear()
        for module in root.modules():
            for name, param in module._parameters.items():
                if param is not None:
                    before[(id(module), name)] = param

    def restore(_module, _incompatible) -> None:
        adopted = []
        for module in root.modules():
            for name, param in list(module._parameters.items()):
                old = before.get((id(module), name))
                if param is None or old is None or param is old:
                    continue
                if keep(old) and not _sharded(param) and not old.is_meta:
                    with torch.no_grad():
                        old.copy_(param)
                    module._parameters[name] = old
                else:
                    adopted.append(param)
        before.clear()
        if adopted:
            adopt(adopted)

    root.register_load_state_dict_pre_hook(remember)
    root.register_load_state_dict_post_hook(restore)


def _sharded(param: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(param, DTensor)
