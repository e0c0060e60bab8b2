"""``FullyShardedStrategy``: parameters, gradients and optimizer state sharded across replicas (ZeRO stage 3).

Built on PyTorch's FSDP2, ``torch.distributed.fsdp.fully_shard`` (parameters become ``DTensor``s sharded on dim 0),
after Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC 2020) and
Zhao et al., "PyTorch FSDP" (VLDB 2023). Start-up is :class:`MirroredStrategy`'s (same launch routes, same
fallback); what differs is what ``scope()`` does with what it created, at its first use or exit:

1. parameters and buffers built inside are made identical on every replica (broadcast from replica 0);
2. each model built inside is sharded: the units chosen by :mod:`allgpu.strategies.sharded.plan` first, then the
   root; each replica keeps about 1/N of every parameter;
3. optimizers built inside (over the not-yet-sharded parameters, as users write them) are pointed at the sharded
   parameters, so their state is sharded too.

Keras models (PyTorch backend) built inside are sharded once Keras has built them (at their first use or the
scope's exit when built there, else at the first ``fit`` / ``evaluate`` / ``predict``), with their Keras optimizer's state, by
:mod:`allgpu.keras.sharded` (each Keras model is one FSDP unit).

Forward all-gathers a unit's parameters and frees them afterwards (``reshard_after_forward=True``); backward
all-gathers again, computes and reduce-scatters the gradients: each replica receives the average gradient of its
own shard. ``accumulate(k)`` / ``no_sync`` skip the reduce-scatter on non-final micro-batches.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import weakref

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from allgpu import keras as keras_support
from allgpu.errors import ArgumentError, ArgumentTypeError, ShardingError
from allgpu.core import hf_save
from allgpu.core.assign_load import watch_assign
from allgpu.core.mirror import mark_mirrored, mirror_tensors
from allgpu.runtime.gloo_drain import wait_for_gloo_workers
from allgpu.strategies.base.full_state import full_state
from allgpu.strategies.sharded.meta_init import materialise, meta_roots
from allgpu.strategies.mirrored import MirroredStrategy
from allgpu.strategies.sharded.compile import ShardedCompile, compile_sharded
from allgpu.strategies.sharded.forward_check import ForwardCheck
from allgpu.strategies.sharded.sync import ShardedGradientSync
from allgpu.strategies.sharded.plan import describe, plan_units, validate_shard_modules

PRECISIONS = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}


class FullyShardedStrategy(MirroredStrategy):
    """Fully sharded data parallelism on FSDP2: each replica holds ~1/N of parameters, gradients, optimizer state.

    Same API and launch routes as :class:`MirroredStrategy` (``python train.py``, ``allgpu.launch``,
    ``allgpu run`` / torchrun, ``TF_CONFIG``); models and optimizers must be built inside ``scope()``.

    Args:
        devices / num_replicas / timeout: as for :class:`MirroredStrategy`.
        shard_modules: which submodules are their own FSDP unit (one all-gather and one reduce-scatter each):
            None (each submodule whose class repeats; the root takes the rest), a Module class, a list of
            classes, or a predicate ``fn(module) -> bool``.
        reshard_after_forward: free gathered parameters after forward and gather again in backward (least
            memory); False keeps them until backward (one all-gather fewer per unit and step).
        mixed_precision: None, ``"bf16"`` or ``"fp16"``: parameters are all-gathered and computed in that dtype,
            gradients reduced in float32, the optimizer steps the float32 shards (FSDP2 ``MixedPrecisionPolicy``).
        offload_to_cpu: keep the sharded parameters, gradients and optimizer state in host memory
            (FSDP2 ``CPUOffloadPolicy``; the optimizer steps on CPU).

    Raises:
        TypeError / ValueError: a bad argument, raised before anything starts.
        DeviceError / StrategyStartError / ClusterConfigError: as for :class:`MirroredStrategy`.
        ShardingError (at the first use of what ``scope()`` created): ``shard_modules`` splits a tied weight
            across units, or an optimizer stepped before its parameters were sharded.
    """

    #: every forward pass all-gathers parameters, so every replica must run the same number (``evaluate`` pads).
    forward_is_collective = True
    multi_worker = True  # like MultiWorkerMirroredStrategy: a launch-free start takes its place from TF_CONFIG too

    def __init__(self, devices=None, num_replicas: int | None = None, *, shard_modules=None,
                 reshard_after_forward: bool = True, mixed_precision: str | None = None,
                 offload_to_cpu: bool = False, timeout: float = 1800.0):
        _validate(num_replicas, shard_modules, reshard_after_forward, mixed_precision, offload_to_cpu, timeout)
        super().__init__(devices, num_replicas=num_replicas, timeout=timeout)
        self.shard_modules = shard_modules
        self.reshard_after_forward = reshard_after_forward
        self.mixed_precision = mixed_precision
        self.offload_to_cpu = offload_to_cpu
        self._own_group = False
        if not dist.is_initialized():  # one replica: a private world-of-one group, so sharding works the same
            backend = "gloo" if self.device.type == "cpu" else "nccl"
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                    timeout=datetime.timedelta(seconds=timeout))
            self._own_group = True
            atexit.register(wait_for_gloo_workers)  # its collectives run on Gloo threads too
        self._mesh = init_device_mesh(self.device.type, (self.num_replicas_in_sync,))
        self._sync = ShardedGradientSync(self._group)
        self._forwards = ForwardCheck(self._group)
        self._overlap.close()  # the mirrored strategies' compile hook: graph splitting has no buckets to follow here
        self._overlap = ShardedCompile()  # a user's torch.compile(model) compiles each unit
        self._sharded: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
        self.plans: dict[str, str] = {}  # root class name -> plan in words (for logs and tests)
        #: meta-device models: the most parameter bytes held in full at once while materialising (one module's)
        self.init_full_bytes = 0

    @property
    def gradient_sync(self) -> ShardedGradientSync:
        """The reduce-scatter driver (counters ``rounds``, ``collectives``, ``all_gathers``)."""
        return self._sync

    # -- variables ---------------------------------------------------------------------------------------------
    def _mirror_recorded(self, params: list, buffers: list, roots: list, late: bool) -> None:
        """Shard what ``scope()`` created, at its first use or the outermost exit (base class: when).

        Every replica must run the same scope (it broadcasts and shards collectively). Modules are born on the
        replica's device in full, then sharded, so one replica must hold the whole model's parameters once at
        build time (not its gradients or optimizer state) -- unless the model is built on the meta device
        (``with strategy.scope(), torch.device("meta"):``): then it is sharded first and only the shards are
        materialised, one module's parameters in full at a time, each initialised by its ``reset_parameters()``
        under a seed from replica 0's ``torch.initial_seed()`` and the module's name
        (:mod:`allgpu.strategies.sharded.meta_init`; the same on any replica count). Keras models are sharded
        when Keras has built them (:meth:`_mirror_keras`); their ``fit`` etc. train on every replica.

        Raises:
            ShardingError: a sharded model's first use was an optimizer step (its gradients were computed in full).
        """
        if late and any(p.grad is not None for p in params):
            raise ShardingError("an optimizer stepped before the model built in strategy.scope() ran a forward pass "
                                "allgpu could see (a fully compiled call), so it was not sharded in time. Fix: run "
                                "one forward pass eagerly first, or leave the scope before compiling.")
        self._shard([r for r in roots if not keras_support.is_keras_model(r)], buffers)

    def mirror(self, module: nn.Module) -> nn.Module:
        """Shard a module built outside ``scope()`` (broadcast from replica 0, then ``fully_shard``). Returns it.

        Build its optimizer afterwards, from the returned module's parameters. A Keras model is adopted as if
        built in ``scope()`` (sharded once built, with its compiled optimizer's state). A collective.
        """
        if keras_support.is_keras_model(module):
            keras_support.adopt(self, [module])
            return module
        if not isinstance(module, nn.Module):
            raise ArgumentTypeError(f"mirror() takes a torch.nn.Module; got {type(module).__name__}.")
        self._shard([module], list(module.buffers()))
        return module

    def compile(self, model: nn.Module, *, backend="inductor", **compile_kwargs) -> nn.Module:
        """Compile a sharded ``model`` per FSDP unit: each innermost unit's ``forward`` goes through
        ``torch.compile(backend=..., **compile_kwargs)`` in place, and FSDP2's all-gather and reduce-scatter hooks
        run eagerly around it (torchtitan's per-block compile; see :mod:`allgpu.strategies.sharded.compile`).
        A plain ``torch.compile(model)`` is turned into the same at its first call. Local.
        Returns ``model`` itself (compiled in place; its parameters and optimizers are unchanged).
        """
        return compile_sharded(model, backend=backend, **compile_kwargs)

    def _shard(self, roots: list[nn.Module], buffers: list) -> None:
        roots = [r for r in roots if not isinstance(r, FSDPModule) and any(True for _ in r.parameters())]
        if not roots:
            return
        on_meta = meta_roots(roots)  # built under torch.device("meta"): shard first, then materialise the shards
        if on_meta:
            seed = self._group.broadcast_object(torch.initial_seed(), where="strategy.scope() exit (meta init seed)")
            mirror_tensors([b for b in buffers if not b.is_meta], self._group)
        else:
            mirror_tensors([p for r in roots for p in r.parameters() if not isinstance(p, DTensor)] + buffers,
                           self._group)  # a module sharded before (wrapped in a new root) is identical already
        replaced: dict[int, nn.Parameter] = {}
        originals: list[nn.Parameter] = []  # kept alive until optimizers are re-pointed, so their ids stay unique
        for root in roots:
            root_name = type(root).__name__
            before = list(root.named_parameters(remove_duplicate=False))
            units = [u for u in plan_units(root, self.shard_modules) if not isinstance(u, FSDPModule)]
            for unit in units:
                fully_shard(unit, **self._fsdp_kwargs())
            fully_shard(root, **self._fsdp_kwargs())
            if on_meta:
                held = materialise(root, torch.device("cpu") if self.offload_to_cpu else self.device, seed)
                self.init_full_bytes = max(self.init_full_bytes, held)
            after = dict(root.named_parameters(remove_duplicate=False))
            replaced.update({id(old): after[name] for name, old in before})
            originals.extend(old for _, old in before)
            self._sync.attach(root)
            self._offer_no_sync(root)  # FSDP1's and DDP's `with model.no_sync():`, kept by a ported script
            hf_save.offer(root, self._writer, self.full_state_dict)  # save_pretrained: gathered, written once
            self._forwards.watch(root)  # a forward on some replicas only is named at its first all-gather
            watch_assign(root, keep=lambda p: False, adopt=mark_mirrored)  # FSDP2 adopts what assign=True loads
            self._sharded.add(root)
            self.plans[root_name] = describe(units)
        _repoint_optimizers(replaced)
        mark_mirrored(replaced.values())

    def _mirror_keras(self, model, values: list, optimizer_values: list) -> None:
        """Make a built Keras model's variables identical, then shard it (once) and its optimizer's slots.

        Called by :class:`allgpu.keras.replica.KerasReplica` whenever the model or its optimizer has built new
        variables. A collective. Raises UnsupportedError for what :mod:`allgpu.keras.sharded` cannot shard.
        """
        from allgpu.keras import sharded

        fresh = [t for t in values + optimizer_values
                 if id(t) not in self._mirrored_ids and not isinstance(t, DTensor)]
        mirror_tensors(fresh, self._group)
        self._mirrored_ids.update(id(t) for t in fresh)
        if not sharded.is_sharded(model):
            params = sharded.shard_model(model, self._fsdp_kwargs())
            self._sync.attach(model)
            self._sharded.add(model)
            self.plans[type(model).__name__] = "one unit: the whole Keras model"
            mark_mirrored(params)
            if self._check is not None:
                self._check.trust(model)
        sharded.shard_optimizer_slots(getattr(model, "optimizer", None), model)

    def _fsdp_kwargs(self) -> dict:
        dtype = PRECISIONS[self.mixed_precision]
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype else \
            MixedPrecisionPolicy()
        offload = CPUOffloadPolicy(pin_memory=self.device.type == "cuda") if self.offload_to_cpu else OffloadPolicy()
        return dict(mesh=self._mesh, reshard_after_forward=self.reshard_after_forward, mp_policy=policy,
                    offload_policy=offload)

    # -- export ------------------------------------------------------------------------------------------------
    def full_state_dict(self, model: nn.Module) -> dict:
        """The model's plain (unsharded) state dict on replica 0, on CPU; ``{}`` on the other replicas.

        A collective: every replica must call it. For export (``torch.save``, another framework); to resume
        training use :func:`allgpu.checkpoint.save`, which never gathers the model on one replica.
        ``torch.save(strategy.full_state_dict(model), path)`` on every replica writes once (replica 0; the others
        return once the file is complete).
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if not isinstance(model, nn.Module):
            raise ArgumentTypeError(f"full_state_dict(model) takes a torch.nn.Module; got {type(model).__name__}.")
        if not isinstance(model, FSDPModule):
            return full_state({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                              if self.is_chief else {}, self._writer)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.num_replicas_in_sync == 1:  # one shard is the whole tensor: torch returns the live parameter itself
            full = {k: v.detach().clone() for k, v in full.items()}
        return full_state(full, self._writer)

    def close(self) -> None:
        super().close()
        if self._own_group and dist.is_initialized():
            dist.destroy_process_group()
            wait_for_gloo_workers()
            self._own_group = False


def _repoint_optimizers(replaced: dict[int, nn.Parameter]) -> None:
    """Point optimizers that hold pre-sharding parameters at their sharded replacements, in place.

    Users build the optimizer inside ``scope()`` from ``model.parameters()`` before the scope exits, i.e. before
    FSDP2 has replaced the parameters. PyTorch has no hook on optimizer construction, so the live optimizers are
    found once per scope exit through the garbage collector's object list.
    """
    if not replaced:
        return
    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.optim.Optimizer):  # type(): isinstance would touch lazy proxies
            continue
        for group in obj.param_groups:
            params = group["params"]
            for i, p in enumerate(params):
                new = replaced.get(id(p))
                if new is None:
                    continue
                if obj.state.get(p):
                    raise ShardingError(f"{type(obj).__name__} already stepped on a parameter before it was sharded, "
                                        "so its state is not sharded. Fix: build the optimizer inside "
                                        "strategy.scope() and step it only after the scope exits.")
                obj.state.pop(p, None)
                params[i] = new


def _validate(num_replicas, shard_modules, reshard_after_forward, mixed_precision, offload_to_cpu, timeout) -> None:
    if num_replicas is not None and (isinstance(num_replicas, bool) or not isinstance(num_replicas, int)
                                     or num_replicas < 1):
        raise ArgumentError(f"num_replicas={num_replicas!r}; expected a positive int, or None for every device.")
    validate_shard_modules(shard_modules)
    if not isinstance(reshard_after_forward, bool):
        raise ArgumentTypeError(f"reshard_after_forward={reshard_after_forward!r}; expected True or False.")
    if type(mixed_precision).__name__ in ("MixedPrecision", "MixedPrecisionPolicy"):  # FSDP1's, FSDP2's objects
        dtype = {torch.bfloat16: "'bf16'", torch.float16: "'fp16'"}.get(getattr(mixed_precision, "param_dtype", None),
                                                                      "None")
        raise ArgumentTypeError(f"mixed_precision={mixed_precision!r} is FSDP's policy object; FullyShardedStrategy "
                                f"takes a name. Fix: mixed_precision={dtype} (parameters all-gathered and computed in "
                                "that dtype, gradients reduced in float32, float32 shards stepped).")
    if not isinstance(mixed_precision, (str, type(None))) or mixed_precision not in PRECISIONS:
        raise ArgumentError(f"mixed_precision={mixed_precision!r}; expected None, 'bf16' or 'fp16'.")
    if not isinstance(offload_to_cpu, bool):
        fix = (f" Fix: offload_to_cpu={bool(offload_to_cpu.offload_params)} for FSDP1's {offload_to_cpu!r}."
               if hasattr(offload_to_cpu, "offload_params") else "")
        raise ArgumentTypeError(f"offload_to_cpu={offload_to_cpu!r}; expected True or False.{fix}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ArgumentError(f"timeout={timeout!r}; expected a positive number of seconds.")
