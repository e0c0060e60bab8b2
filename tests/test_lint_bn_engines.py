"""PT008 for BatchNorm models Accelerate prepares (issue 21, tuning half a0505, diffusers' AutoencoderKL training
script): ``accelerator.prepare`` wraps each model in DDP on several GPUs, so a BatchNorm model prepared without
SyncBatchNorm normalises each GPU's batch alone. Written scripts, with whether PT008 must report them."""

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
