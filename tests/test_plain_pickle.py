"""A mirrored model pickles as the plain model (found porting pytorch/examples' word_language_model, which saves
its best model with ``torch.save(model, f)`` and loads it with ``torch.load`` under ``safe_globals`` of its own
classes): before, ``torch.save`` failed with ``Can't pickle local object 'watch_assign.<locals>.remember'``."""

import copy
import io

import pytest
import torch

import allgpu


class Tiny(torch.nn.Module):  # a user's own class, as the example's RNNModel
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Embedding(10, 4)
        self.decoder = torch.nn.Linear(4, 10)

    def forward(self, x):
        return self.decoder(self.encoder(x))


SAFE = [Tiny, torch.nn.Embedding, torch.nn.Linear]


def _load(buf: io.BytesIO) -> torch.nn.Module:
    buf.seek(0)
    with torch.serialization.safe_globals(SAFE):
        return torch.load(buf)  # weights_only=True, torch's default


def _allgpu_hooks(module: torch.nn.Module) -> int:
    def ours(hook) -> bool:
        fn = getattr(getattr(hook, "hook", hook), "__func__", getattr(hook, "hook", hook))
        return (getattr(fn, "__module__", None) or "").startswith("allgpu")

    return sum(1 for m in module.modules() for v in vars(m).values() if isinstance(v, dict)
               for h in v.values() if ours(h))


def test_a_mirrored_model_saves_loads_and_deep_copies_as_the_plain_model():
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with strategy.scope():
            model = Tiny()
            buf = io.BytesIO()
            torch.save(model, buf)  # inside the scope, before first use: the first-use hook is not saved
            assert _allgpu_hooks(_load(buf)) == 0
        model(torch.tensor([1, 2])).sum().backward()
        assert _allgpu_hooks(model) > 0  # the live model keeps its hooks
        buf = io.BytesIO()
        torch.save(model, buf)
        loaded = _load(buf)
        assert type(loaded) is Tiny and _allgpu_hooks(loaded) == 0
        assert callable(model.no_sync)  # DDP's name, given to a mirrored root; not saved
        assert not any(k.startswith("_allgpu") or k in ("__getstate__", "no_sync")
                       for m in loaded.modules() for k in vars(m))
        for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        ema = copy.deepcopy(model)  # timm's ModelEmaV2, torch's AveragedModel
        assert _allgpu_hooks(ema) == 0 and "__getstate__" not in vars(ema) and not hasattr(ema, "no_sync")
        ema.load_state_dict({k: v + 1 for k, v in model.state_dict().items()}, assign=True)
        torch.testing.assert_close(ema.decoder.bias, model.decoder.bias + 1)
        weight = model.decoder.weight  # the live model's assign=True load still keeps the mirrored parameter
        model.load_state_dict({k: v * 0 for k, v in model.state_dict().items()}, assign=True)
        assert model.decoder.weight is weight and float(weight.detach().abs().sum()) == 0
    finally:
        strategy.close()


def test_torch_save_of_a_sharded_model_names_full_state_dict():
    # before: a bare PicklingError ("Can't pickle <class '...FSDPSequential'>: attribute lookup ... failed")
    strategy = allgpu.FullyShardedStrategy(num_replicas=1)
    try:
        with strategy.scope():
            model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        model(torch.zeros(2, 4)).sum().backward()
        with pytest.raises(allgpu.errors.UnsupportedError, match=r"torch.save\(strategy.full_state_dict\(model\)"):
            torch.save(model, io.BytesIO())
    finally:
        strategy.close()
