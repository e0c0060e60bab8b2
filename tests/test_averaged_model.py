"""``torch.optim.swa_utils.AveragedModel`` (PyTorch's SWA recipe, and its EMA via ``get_ema_multi_avg_fn``) deep-copies
the mirrored model; ``update_bn(loader, swa_model)`` then runs it in train mode with gradients enabled to recompute
BatchNorm statistics, training nothing. That forward raised ``NotMirroredError`` ("created outside
strategy.scope(), so replica 0 would train it alone"), blaming the user for what they had not done (found running the
recipe from PyTorch's SWA documentation, ported to allgpu). Its parameters are now checked at their gradients."""

import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn, update_bn

import allgpu
from allgpu.errors import NotMirroredError


def _model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("ema", [False, True])
def test_update_bn_on_an_averaged_copy_of_a_mirrored_model_is_not_training(ema):
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with strategy.scope():
            model = _model()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        swa = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9) if ema else None)
        x = torch.randn(16, 4)
        for _ in range(2):
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            swa.update_parameters(model)
        update_bn([(x,)], swa)  # train mode, gradients enabled: BatchNorm statistics only
        mean = x @ swa.module[0].weight.detach().T + swa.module[0].bias.detach()
        torch.testing.assert_close(swa.module[1].running_mean, mean.mean(0))
        swa(x)  # update_bn left it in train mode, as the recipe's `preds = swa_model(test_input)` uses it
        with pytest.raises(NotMirroredError, match=r"AveragedModel\.module\.\d\.(weight|bias)"):
            swa(x).sum().backward()  # training the copy is still an error
        with pytest.raises(NotMirroredError, match=r"Sequential\.0\.weight"):
            _model()(x)  # and a plain model outside the scope still raises at its training forward
    finally:
        strategy.close()
