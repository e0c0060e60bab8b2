"""PT008 for BatchNorm models Accelerate prepares (issue 21, tuning half a0505, diffusers' AutoencoderKL training
script): ``accelerator.prepare`` wraps each model in DDP on several GPUs, so a BatchNorm model prepared without
SyncBatchNorm normalises each GPU's batch alone; and Lightning's Trainer set for several GPUs without
``sync_batchnorm=True`` (tuning half a0702, byol-pytorch's Lightning example). Written scripts, with whether PT008
must report them."""

import pytest

from tests.lint_helpers import ids

HEAD = "import torch\nfrom accelerate import Accelerator\n"

CASES = [
    ("patchgan-discriminator-prepared", True, HEAD + """
from taming.modules.losses.vqperceptual import NLayerDiscriminator
accelerator = Accelerator()
disc = NLayerDiscriminator(input_nc=3, n_layers=3, use_actnorm=False).apply(weights_init)
vae, disc, opt = accelerator.prepare(vae, disc, opt)
"""),
    ("patchgan-converted-first", False, HEAD + """
from taming.modules.losses.vqperceptual import NLayerDiscriminator
accelerator = Accelerator()
disc = NLayerDiscriminator(input_nc=3, n_layers=3, use_actnorm=False)
disc = torch.nn.SyncBatchNorm.convert_sync_batchnorm(disc)
vae, disc, opt = accelerator.prepare(vae, disc, opt)
"""),
    ("patchgan-with-actnorm", False, HEAD + """
from taming.modules.losses.vqperceptual import NLayerDiscriminator
accelerator = Accelerator()
disc = NLayerDiscriminator(input_nc=3, n_layers=3, use_actnorm=True)
disc, opt = accelerator.prepare(disc, opt)
"""),
    ("torchvision-resnet-prepared", True, HEAD + """
import torchvision
accelerator = Accelerator()
model = torchvision.models.resnet50()
model, opt, loader = accelerator.prepare(model, opt, loader)
"""),
    ("own-batchnorm-layers-prepared", True, HEAD + """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(16)
accelerator = Accelerator()
model, opt = accelerator.prepare(Net(), opt)
"""),
    ("vit-prepared", False, HEAD + """
import torchvision
accelerator = Accelerator()
model = torchvision.models.vit_b_16()
model, opt = accelerator.prepare(model, opt)
"""),
    ("only-a-loader-prepared", False, HEAD + """
import torchvision
accelerator = Accelerator()
model = torchvision.models.resnet50().eval()
loader = accelerator.prepare(loader)
"""),
]


@pytest.mark.parametrize("name,reported,src", CASES, ids=[c[0] for c in CASES])
def test_accelerate_prepared_bn_model(name, reported, src):
    assert ("PT008" in ids(src)) is reported, name


PL = """
import torch
import pytorch_lightning as pl
from torchvision import models

class Learner(pl.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def training_step(self, batch, _):
        return self.net(batch).sum()

NUM_GPUS = {gpus}
resnet = models.{arch}(pretrained=True)
model = Learner(resnet)
trainer = pl.Trainer(gpus=NUM_GPUS, max_epochs=10{extra})
trainer.fit(model, loader)
"""

OWN_BN = """
import torch
import lightning as L

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))

trainer = L.Trainer(accelerator="gpu", devices=4, strategy="{strategy}"{extra})
trainer.fit(Net(), datamodule=dm)
"""

PL_CASES = [
    ("resnet-two-gpus", True, PL.format(gpus=2, arch="resnet50", extra="")),
    ("resnet-synced", False, PL.format(gpus=2, arch="resnet50", extra=", sync_batchnorm=True")),
    ("resnet-sync-flag", False, PL.format(gpus=2, arch="resnet50", extra=", sync_batchnorm=args.sync_bn")),
    ("resnet-one-gpu", False, PL.format(gpus=1, arch="resnet50", extra="")),
    ("resnet-dataparallel", False, PL.format(gpus=2, arch="resnet50", extra=", accelerator='dp'")),
    ("vit-no-batchnorm", False, PL.format(gpus=2, arch="vit_b_16", extra="")),
    ("own-bn-ddp", True, OWN_BN.format(strategy="ddp", extra="")),
    ("own-bn-ddp-synced", False, OWN_BN.format(strategy="ddp", extra=", sync_batchnorm=True")),
    ("own-bn-ddp-unused-parameters", True, OWN_BN.format(strategy="ddp_find_unused_parameters_true", extra="")),
    ("own-bn-settings-unknown", False, OWN_BN.format(strategy="ddp", extra=", **trainer_kwargs")),
]


@pytest.mark.parametrize("name,reported,src", PL_CASES, ids=[c[0] for c in PL_CASES])
def test_lightning_trainer_bn_model(name, reported, src):
    assert ("PT008" in ids(src)) is reported, name
