"""PyTorch and allgpu rules: each must fire on its pitfall and stay quiet on the near-misses of issue 3."""

import pytest
from tests.lint_helpers import ALL_RULES, ids

DDP_HEAD = """
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(Net().cuda(), device_ids=[local_rank])
"""
TRAIN = """
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        opt.step()
"""


def test_pt001_dataparallel_and_quiet_isinstance():
    assert "PT001" in ids("import torch.nn as nn\nmodel = nn.DataParallel(model)\n")
    assert "PT001" in ids("from torch.nn import DataParallel\nmodel = DataParallel(model)\n")
    assert "PT001" not in ids("import torch.nn as nn\nif isinstance(model, nn.DataParallel):\n    model = model.module\n")


@pytest.mark.parametrize("line", ["model.to('cuda:0')", "x = x.cuda(0)", "device = torch.device('cuda:0')",
                                  "device = torch.device('cuda', 0)"])
def test_pt002_hard_coded(line):
    assert "PT002" in ids(DDP_HEAD + line + "\n")


def test_pt002_bare_cuda_without_set_device():
    src = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\nmodel = Net().cuda()\n"
    assert "PT002" in ids(src)


def test_pt002_quiet_bare_cuda_after_set_device():
    assert "PT002" not in ids(DDP_HEAD + "x = x.cuda()\ny = y.to('cuda')\n")


def test_pt002_quiet_default_replaced_by_local_rank():
    src = DDP_HEAD + "device = 'cuda:0'\nif distributed:\n    device = f'cuda:{local_rank}'\nmodel.to(device)\n"
    assert "PT002" not in ids(src)


def test_pt002_quiet_argparse_default_and_single_gpu_script():
    assert "PT002" not in ids(DDP_HEAD + "p.add_argument('--device', default='cuda:0')\nmodel.to(args.device)\n")
    assert "PT002" not in ids("import torch\nmodel.to('cuda:0')\n")


def test_pt003_loader_without_sampler():
    src = DDP_HEAD + "loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=4)\n"
    assert "PT003" in ids(src)


def test_pt003_quiet_with_distributed_sampler_and_for_eval_loader():
    src = DDP_HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler, num_workers=4)\n" \
          "val = DataLoader(vds, batch_size=8, num_workers=4)\n" + TRAIN
    assert "PT003" not in ids(src)


def test_pt004_no_set_epoch():
    src = DDP_HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler, num_workers=4)\n" \
          + TRAIN.replace("    sampler.set_epoch(epoch)\n", "")
    assert "PT004" in ids(src)


def test_pt004_quiet_shuffle_false_or_single_pass():
    no_shuffle = DDP_HEAD + "sampler = DistributedSampler(ds, shuffle=False)\n" + TRAIN.replace("    sampler.set_epoch(epoch)\n", "")
    single = DDP_HEAD + "sampler = DistributedSampler(ds)\nfor x in DataLoader(ds, sampler=sampler, num_workers=2):\n    pass\n"
    assert "PT004" not in ids(no_shuffle)
    assert "PT004" not in ids(single)


def test_pt005_no_workers():
    assert "PT005" in ids("from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=4)\n"
                          "for x in loader:\n    loss.backward()\n")
    assert "PT005" not in ids("from torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=4)\n"
                              "for x in loader:\n    loss.backward()\n")


ACCUM = DDP_HEAD + """
for i, x in enumerate(loader):
    {sync}
    loss = model(x).sum() / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
"""


def test_pt006_accumulation_without_no_sync():
    assert "PT006" in ids(ACCUM.format(sync="pass"))


def test_pt006_quiet_require_backward_grad_sync():
    assert "PT006" not in ids(ACCUM.format(sync="model.require_backward_grad_sync = (i + 1) % accum_steps == 0"))


def test_pt007_save_every_rank():
    assert "PT007" in ids(DDP_HEAD + "torch.save(model.state_dict(), 'm.pt')\n")


@pytest.mark.parametrize("tail", [
    "if dist.get_rank() == 0:\n    torch.save(model.state_dict(), 'm.pt')\n",
    "def save_on_master(*a):\n    if is_main_process():\n        torch.save(*a)\nsave_on_master(model.state_dict(), 'm.pt')\n",
    "def save(path):\n    torch.save(model.state_dict(), path)\nif args.is_chief:\n    save('m.pt')\n",
    "def save(path):\n    if rank != 0:\n        return\n    torch.save(model.state_dict(), path)\nsave('m.pt')\n",
])
def test_pt007_quiet_when_guarded(tail):
    assert "PT007" not in ids(DDP_HEAD + tail)


def test_pt008_batchnorm_and_quiet_with_sync():
    assert "PT008" in ids(DDP_HEAD + "bn = torch.nn.BatchNorm2d(16)\n")
    assert "PT008" not in ids(DDP_HEAD + "bn = torch.nn.BatchNorm2d(16)\nm = torch.nn.SyncBatchNorm.convert_sync_batchnorm(m)\n")


def test_pt009_not_wrapped_and_quiet_when_synced():
    base = "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\nloss.backward()\n"
    assert "PT009" in ids(base)
    assert "PT009" not in ids(base + "for p in model.parameters():\n    dist.all_reduce(p.grad)\n")


@pytest.mark.parametrize("value,flag", [("'0'", True), ("'3'", True), ("'-1'", False), ("'0,1,2,3'", False),
                                        ("str(rank)", False)])
def test_pt010_cuda_visible_devices(value, flag):
    assert ("PT010" in ids(f"import os\nimport torch\nos.environ['CUDA_VISIBLE_DEVICES'] = {value}\n")) is flag


def test_pt011_torch_load():
    assert "PT011" in ids("import torch\nsd = torch.load('m.pt')\n")
    assert "PT011" in ids("import torch\nsd = torch.load('m.pt', weights_only=False)\n")
    assert "PT011" not in ids("import torch\nsd = torch.load('m.pt', weights_only=True)\n")


# ---- AG001 ----------------------------------------------------------------------------------------------
AG = """
import torch
import allgpu
strategy = allgpu.MirroredStrategy()
{body}
allgpu.fit(model, opt, torch.nn.MSELoss(), data, epochs=1, global_batch_size=8, strategy=strategy)
"""


def test_ag001_model_outside_scope():
    body = "model = torch.nn.Linear(4, 1)\nwith strategy.scope():\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)"
    assert "AG001" in ids(AG.format(body=body))
    other = "other = torch.nn.Linear(4, 1)\nstrategy.mirror(other)\n" + body  # another model mirrored: still found
    assert "AG001" in ids(AG.format(body=other))


@pytest.mark.parametrize("body", [
    "with strategy.scope():\n    model = torch.nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)",
    "def make():\n    return torch.nn.Linear(4, 1)\nscope = strategy.scope()\nwith scope:\n    model = make()",
    "ref = torch.nn.Linear(4, 1)\nref.eval()\nwith strategy.scope():\n    model = torch.nn.Linear(4, 1)",
    # strategy.mirror(model), the documented fix for a model built outside the scope (a DDP port's), also when the
    # model is mirrored as an attribute of the class it is handed to (ddp-tutorial-series multinode.py's Trainer)
    "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel = strategy.mirror(model)",
    "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nclass T:\n"
    "    def __init__(self, model):\n        self.model = strategy.mirror(model.to(strategy.device))\nT(model)",
    "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nclass T:\n"
    "    def __init__(self, model):\n        self.model = model\n        self.model = strategy.mirror(self.model)\nT(model)",
])
def test_ag001_quiet(body):
    assert "AG001" not in ids(AG.format(body=body))


def test_pt007_quiet_for_per_rank_file():
    assert "PT007" not in ids(DDP_HEAD + "torch.save(shard, f'shard_{dist.get_rank()}.pt')\n")


def test_pt002_quiet_in_library_that_only_imports_dist():
    src = "import torch\nimport torch.distributed as dist\ndef helper(x):\n    return x.to(torch.device('cuda'))\n"
    assert "PT002" not in ids(src)


# ---- issue 11: families the real-world corpus showed --------------------------------------------------------
def lines_of(src: str, rule: str) -> list[int]:
    import textwrap

    from allgpu.lint import check_source
    return [f.line for f in check_source(textwrap.dedent(src), "train.py") if f.rule_id == rule]


@pytest.mark.parametrize("guard", [
    "local_rank == 0",                                   # torchrun's per-node rank
    "args.local_rank in [-1, 0]",                        # the old transformers examples
    "int(os.environ['LOCAL_RANK']) == 0",
    "not args.multiprocessing_distributed or args.rank % ngpus_per_node == 0",   # pytorch/examples imagenet
])
def test_pt007_per_node_guard_is_not_a_job_guard(guard):
    src = DDP_HEAD + f"if {guard}:\n    torch.save(model.state_dict(), 'm.pt')\n"
    assert "PT007" in ids(src)


def test_pt007_per_node_guard_at_the_call_site_of_a_helper():
    src = DDP_HEAD + ("def save_checkpoint(state, filename):\n    torch.save(state, filename)\n"
                      "if args.rank % ngpus_per_node == 0:\n    save_checkpoint(model.state_dict(), 'c.pt')\n")
    assert lines_of(src, "PT007") == [12]


@pytest.mark.parametrize("guard", ["args.rank == 0", "dist.get_rank() == 0 and epoch % 10 == 0",
                                   "not args.distributed or dist.get_rank() == 0", "utils.is_main_process()"])
def test_pt007_quiet_with_job_guard(guard):
    assert "PT007" not in ids(DDP_HEAD + f"if {guard}:\n    torch.save(model.state_dict(), 'm.pt')\n")


def test_pt011_quiet_under_safe_globals():
    src = ("import torch\nwith open(p, 'rb') as f:\n    with torch.serialization.safe_globals([Net]):\n"
           "        model = torch.load(f)\n")
    assert "PT011" not in ids(src)
    assert "PT011" in ids("import torch\nwith open(p, 'rb') as f:\n    model = torch.load(f)\n")


@pytest.mark.parametrize("workers,flag", [("0", True), ("4", False)])
def test_pt005_num_workers_through_a_name(workers, flag):
    src = (f"import torch\nnum_workers = {workers}\n"
           "loader = torch.utils.data.DataLoader(ds, batch_size=20, num_workers=num_workers)\n"
           "for x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n")
    assert ("PT005" in ids(src)) is flag


def test_pt002_cuda_if_available_without_set_device():
    tail = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel.to(device)\n"
    src = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n" + tail
    assert "PT002" in ids(src)
    assert "PT002" not in ids(DDP_HEAD + tail)  # set_device(local_rank) makes 'cuda' this rank's GPU


def test_pt004_quiet_when_sampler_goes_to_an_imported_helper():
    src = DDP_HEAD + ("from utils import train\nsampler = DistributedSampler(ds, shuffle=True)\n"
                      "loader = DataLoader(ds, sampler=sampler, num_workers=2)\n"
                      "for epoch in range(10):\n    train(model, loader, epoch, sampler=sampler)\n")
    assert "PT004" not in ids(src)
    assert "PT004" in ids(src.replace("sampler=sampler)\n", "None)\n").replace(
        "train(model, loader, epoch, None)", "train(model, loader, epoch)"))


SCALER_LOOP = """
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum_iter
    loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=(i + 1) % accum_iter == 0)
    if (i + 1) % accum_iter == 0:
        optimizer.zero_grad()
"""


def test_pt006_accumulation_through_a_scaler_flag_on_ddp():
    assert lines_of(DDP_HEAD + SCALER_LOOP, "PT006") == [14]


def test_pt006_scaler_flag_in_a_distributed_helper_module():
    helper = "import torch\nimport util.misc as misc\ndef train_one_epoch(model, loader, optimizer, loss_scaler, accum_iter):" \
             + SCALER_LOOP.replace("\n", "\n    ") + "\n    return misc.all_reduce_mean(loss.item())\n"
    assert "PT006" in ids(helper)
    assert "PT006" not in ids(helper.replace("    return misc.all_reduce_mean(loss.item())\n", ""))  # single GPU


def test_pt006_quiet_scaler_flag_with_no_sync():
    src = DDP_HEAD + SCALER_LOOP.replace("    loss_scaler(", "    with model.no_sync():\n        pass\n    loss_scaler(")
    assert "PT006" not in ids(src)


@pytest.mark.parametrize("build,flag", [
    ("import torchvision\nnet = torchvision.models.resnet50()", True),
    ("from torchvision.models import densenet121\nnet = densenet121()", True),
    ("import torchvision.models as models\nnet = models.__dict__[args.arch]()", True),
    ("import timm\nnet = timm.create_model('resnet50d')", True),
    ("import timm\nnet = timm.create_model('vit_base_patch16_224')", False),
    ("import torchvision\nnet = torchvision.models.vit_b_16()", False),
])
def test_pt008_library_batchnorm_model_under_ddp(build, flag):
    src = DDP_HEAD + build + "\nddp = DDP(net.cuda(), device_ids=[local_rank])\n"
    assert ("PT008" in ids(src)) is flag
    if flag:
        assert lines_of(src, "PT008") == [13]  # at the DDP call that wraps it (line 10 wraps the local Net)
        assert "PT008" not in ids(src + "net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)\n")


def test_pt001_functional_data_parallel():
    assert "PT001" in ids("import torch.nn as nn\nout = nn.parallel.data_parallel(self.main, x, range(2))\n")
    assert "PT001" in ids("from torch.nn.parallel import data_parallel\nout = data_parallel(m, x, [0, 1])\n")


def test_pt007_name_bound_to_a_per_node_test():
    per_node = DDP_HEAD + "is_master = local_rank == 0\nif is_master:\n    torch.save(model.state_dict(), 'm.pt')\n"
    job = DDP_HEAD + ("ddp_rank = int(os.environ['RANK'])\nmaster_process = ddp_rank == 0\n"
                      "if master_process:\n    torch.save(model.state_dict(), 'm.pt')\n")
    assert "PT007" in ids(per_node)
    assert "PT007" not in ids(job)


@pytest.mark.parametrize("pick", ["torch.accelerator.set_device_index(local_rank)",
                                  "os.environ['CUDA_VISIBLE_DEVICES'] = str(local_rank)",
                                  "mesh = torch.distributed.device_mesh.init_device_mesh('cuda', (2,))"])
def test_pt002_quiet_when_each_process_picks_its_gpu(pick):
    src = f"import os\nimport torch\nimport torch.distributed as dist\nlocal_rank = int(os.environ['LOCAL_RANK'])\n" \
          f"{pick}\ndist.init_process_group('nccl')\nmodel = Net().cuda()\nx = x.to('cuda')\n"
    assert "PT002" not in ids(src)
    assert "PT002" in ids(src.replace(pick, "pass"))


def test_pt003_quiet_for_a_dataset_sharded_by_rank():
    src = DDP_HEAD + "ds = ImageDataset(files, shard=dist.get_rank(), num_shards=dist.get_world_size())\n" \
                     "loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=1)\n"
    assert "PT003" not in ids(src)
    assert "PT003" in ids(src.replace("shard=dist.get_rank(), num_shards=dist.get_world_size()", "'train'"))


PT009_BASE = "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n{wrap}\nloss.backward()\n"


@pytest.mark.parametrize("wrap,flag", [("model = make_data_parallel(model, True, device)", False),
                                       ("model = wrap_ddp(model)", False),
                                       ("ddp_setup(rank, world_size)", True), ("pass", True)])
def test_pt009_model_wrapped_by_a_project_helper(wrap, flag):
    assert ("PT009" in ids(PT009_BASE.format(wrap=wrap))) is flag


def test_pt006_quiet_when_the_step_is_under_an_amp_branch_only():
    src = DDP_HEAD + """
loss_accum = 0.0
for x, y in loader:
    loss = model(x).sum()
    loss_accum += loss.item()
    loss.backward()
    if use_amp:
        scaler.step(optimizer)
    else:
        optimizer.step()
"""
    assert "PT006" not in ids(src)
    assert "PT006" in ids(src.replace("if use_amp:", "if (i + 1) % accum_steps == 0 and use_amp:"))


@pytest.mark.parametrize("line", ["ddp = DDP(net, device_ids=[0])", "net = net.to(0)"])
def test_pt002_ddp_device_ids_and_to_int_literal(line):
    src = "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" \
          "dist.init_process_group('nccl')\n" + line + "\n"
    assert "PT002" in ids(src)
    assert "PT002" not in ids(src.replace("[0]", "[local_rank]").replace("to(0)", "to(local_rank)"))


def test_pt002_quiet_for_a_rank_parameter_with_a_literal_fallback():
    src = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
           "def main(rank, distributed):\n    if distributed:\n        dist.init_process_group('nccl')\n"
           "    else:\n        rank = 0\n    net = Net().to(rank)\n    ddp = DDP(net, device_ids=[rank])\n")
    assert "PT002" not in ids(src)


def test_pt006_backward_through_a_local_helper():
    src = DDP_HEAD + """
def backward_step(loss):
    loss.backward()
for i, x in enumerate(loader):
    backward_step(model(x).sum() / accum_steps)
    if (i + 1) % accum_steps == 0:
        optimizer.step()
"""
    assert "PT006" in ids(src)


def test_pt003_explicit_sampler_none_is_no_sampler():
    src = DDP_HEAD + "loader = DataLoader(ds, batch_size=8, shuffle=True, sampler=None, num_workers=2)\n"
    assert "PT003" in ids(src)


def test_pt004_a_loader_factory_is_not_a_helper_that_sets_the_epoch():
    src = DDP_HEAD + ("from timm.data import create_loader\nsampler = DistributedSampler(ds)\n"
                      "loader = create_loader(ds, sampler=sampler)\n"
                      "for epoch in range(10):\n    for x in loader:\n        model(x).sum().backward()\n")
    assert "PT004" in ids(src)


def test_pt008_quiet_when_ddp_wraps_another_module():
    src = DDP_HEAD + ("import torchvision\nbackbone = torchvision.models.resnet50().cuda()\nbackbone.eval()\n"
                      "head = LinearClassifier(backbone.fc.in_features).cuda()\nhead = DDP(head, device_ids=[local_rank])\n")
    assert "PT008" not in ids(src)
    assert "PT008" in ids(src.replace("head = DDP(head,", "backbone = DDP(backbone,"))


def test_pt006_model_wrapped_by_a_project_helper():
    src = """
import torch
import torch.distributed as dist
from utils.torch_utils import smart_DDP
dist.init_process_group('nccl')
model = smart_DDP(model)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum()
    scaler.scale(loss).backward()
    if i - last_opt_step >= accumulate:
        scaler.step(optimizer)
        last_opt_step = i
"""
    assert "PT006" in ids(src)


def test_pt002_quiet_after_an_imported_distributed_init_helper():
    src = "import torch\nimport utils\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" \
          "utils.init_distributed_mode(args)\nmodel = Net().cuda()\nmodel = DDP(model, device_ids=[args.gpu])\n"
    assert "PT002" not in ids(src)
    assert "PT002" in ids(src.replace("utils.init_distributed_mode(args)", "utils.fix_random_seeds(0)"))


def test_pt003_batch_sampler_around_a_distributed_sampler():
    src = DDP_HEAD + ("sampler_train = DistributedSampler(ds)\n"
                      "batch_sampler = torch.utils.data.BatchSampler(sampler_train, 8, drop_last=True)\n"
                      "loader = DataLoader(ds, batch_sampler=batch_sampler, num_workers=2)\n")
    assert "PT003" not in ids(src)
    assert "PT003" in ids(src.replace("DistributedSampler(ds)", "torch.utils.data.RandomSampler(ds)"))


def test_pt006_update_freq_through_a_scaler_in_a_helper():
    src = """
import torch
import utils
def train_one_epoch(model, loader, optimizer, loss_scaler, update_freq, metric_logger):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum() / update_freq
        loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=(step + 1) % update_freq == 0)
    metric_logger.synchronize_between_processes()
"""
    assert "PT006" in ids(src)


def test_pt006_quiet_for_a_wrapper_helper_in_a_single_process_script():
    src = """
import torch
model = wrap_model(model)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum() / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
"""
    assert "PT006" not in ids(src)


@pytest.mark.parametrize("sync", ["if args.sync_bn:\n    model = apex.parallel.convert_syncbn_model(model)\n",
                                  "model = SyncBN.convert(model)\n"])
def test_pt008_quiet_with_other_sync_batchnorm_spellings(sync):
    src = DDP_HEAD + "import torchvision\nnet = torchvision.models.resnet50().cuda()\n" + sync + \
          "net = DDP(net, device_ids=[local_rank])\n"
    assert "PT008" not in ids(src)


def test_pt002_quiet_when_the_file_reads_the_current_device():
    src = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel\nclass Base:\n"
           "    def __init__(self):\n        self.device = torch.device('cuda')\n"
           "    def wrap(self, net):\n        net = net.to(self.device)\n"
           "        return DistributedDataParallel(net, device_ids=[torch.cuda.current_device()])\n")
    assert "PT002" not in ids(src)


def test_pt002_device_0_is_each_process_own_gpu_after_per_rank_visible_devices():
    src = ("import os\nimport torch\nimport torch.distributed as dist\n"
           "from torch.nn.parallel import DistributedDataParallel as DDP\n"
           "def worker(rank, n):\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(rank)\n"
           "    dist.init_process_group('nccl', rank=rank, world_size=n)\n"
           "    model = DDP(Net().to('cuda:0'), device_ids=[0])\n")
    assert "PT002" not in ids(src)


def test_pt007_in_a_script_started_by_an_imported_init_helper():
    src = "import torch\nimport util.misc as misc\nmisc.init_distributed_mode(args)\n" \
          "torch.save(model.state_dict(), 'ckpt.pt')\n"
    assert "PT007" in ids(src)
    assert "PT007" not in ids(src.replace("torch.save(", "if misc.is_main_process():\n    torch.save("))


def test_writefile_cell_of_a_notebook_is_checked_as_a_script():
    import json

    from allgpu.lint import check_source
    script = ("%%writefile train.py\nimport torch\nimport torch.distributed as dist\n"
              "dist.init_process_group('nccl')\nmodel = Net().cuda()\ntorch.save(model.state_dict(), 'm.pt')\n")
    nb = {"cells": [{"cell_type": "markdown", "source": "# DDP"},
                    {"cell_type": "code", "source": script},
                    {"cell_type": "code", "source": "%%writefile -a train.py\nprint('more')\n"},
                    {"cell_type": "code", "source": "!torchrun --nproc_per_node 2 train.py\n"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    found = {(f.rule_id, f.cell, f.line)
             for f in check_source(json.dumps(nb), "ddp.ipynb", select=ALL_RULES)}  # PT002 is off by default
    assert ("PT002", 2, 5) in found and ("PT007", 2, 6) in found
    assert all(cell == 2 for _, cell, _ in found)


def test_pt007_message_names_the_per_node_guard():
    from allgpu.lint import check_source
    src = DDP_HEAD + "if local_rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"
    (f,) = [f for f in check_source(src, "t.py") if f.rule_id == "PT007"]
    assert "per-node" in f.message
    (g,) = [f for f in check_source(DDP_HEAD + "torch.save(model.state_dict(), 'm.pt')\n", "t.py") if f.rule_id == "PT007"]
    assert "every rank" in g.message


# ---- PT002 / PT010 follow the branch (issue 21) -------------------------------------------------------------------
def test_pt002_single_process_branches_and_rank_guards_not_reported():
    head = "import torch\nimport torch.distributed as dist\nimport os\ndist.init_process_group('nccl')\nrank = dist.get_rank()\n"
    src = head + """
if args.distributed:
    torch.cuda.set_device(args.gpu)
    model = model.cuda(args.gpu)
else:
    model = model.to("cuda:0")
if rank == 0:
    ref = ref_model.to("cuda:0")
if args.world_size == 1:
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
device = "cuda:0" if not args.distributed else f"cuda:{rank}"
"""
    assert not {"PT002", "PT010"} & ids(src)
    assert "PT002" in ids(src + "x = y.to('cuda:1')\n")
    assert "PT002" in ids(src.replace("else:\n    model", "if True:\n    model"))


def test_pt005_pt003_read_through_kwargs_dicts():
    head = ("import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "dist.init_process_group('nccl')\nmodel = DDP(net)\n")
    loop = "for x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"
    plain = head + "kw = {'batch_size': 64, 'shuffle': True}\nloader = DataLoader(ds, **kw)\n" + loop
    assert {"PT003", "PT005"} <= ids(plain)
    fine = head + ("kw = dict(batch_size=64, num_workers=4, sampler=DistributedSampler(ds))\n"
                   "loader = DataLoader(ds, **kw)\n" + loop)
    assert not {"PT003", "PT005"} & ids(fine)
    unknown = head + "def make(ds, **kw):\n    return DataLoader(ds, **kw)\nloader = make(ds)\n" + loop
    assert not {"PT003", "PT005"} & ids(unknown)


def test_pt007_else_branch_of_a_rank_guard_is_every_other_rank():
    head = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "dist.init_process_group('nccl')\nmodel = DDP(net)\nrank = dist.get_rank()\n")
    assert "PT007" in ids(head + "if rank == 0:\n    print('x')\nelse:\n    torch.save(model.state_dict(), 'm.pt')\n")
    assert "PT007" not in ids(head + "if rank != 0:\n    print('x')\nelse:\n    torch.save(model.state_dict(), 'm.pt')\n")
    assert "PT007" not in ids(head + "if rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n")


def test_pt005_loader_only_used_for_sampling_not_reported():
    src = """
import torch
from torch.utils.data import DataLoader
sample_loader = DataLoader(prompts, batch_size=4)
sample_loader = accelerator.prepare(sample_loader)
for ex in tqdm(sample_loader):
    images = pipeline(ex["prompt"]).images
train_loader = DataLoader(ds, batch_size=8, num_workers=2)
for x in train_loader:
    loss = model(x).mean()
    accelerator.backward(loss)
    optimizer.step()
"""
    assert "PT005" not in ids(src)
    trained = src.replace('    images = pipeline(ex["prompt"]).images', "    model(ex).mean().backward()\n    optimizer.step()")
    assert "PT005" in ids(trained)


def test_pt006_micro_step_loop_under_accelerate_and_ddp():
    src = """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model, opt, dl = accelerator.prepare(model, opt, dl)
for step in range(steps):
    for _ in range(grad_accum_every):
        loss = model(next(dl_iter))
        accelerator.backward(loss / grad_accum_every)
    opt.step()
    opt.zero_grad()
"""
    assert "PT006" in ids(src)
    assert "PT006" not in ids(src.replace("accelerator.backward(loss / grad_accum_every)",
                                          "with accelerator.no_sync(model):\n            accelerator.backward(loss)"))
    # the step inside the micro-step loop: not accumulation
    assert "PT006" not in ids(src.replace("        accelerator.backward(loss / grad_accum_every)\n",
                                          "        accelerator.backward(loss)\n        opt.step()\n"))



def test_mp_spawn_worker_is_followed():
    """The function given to mp.spawn is the training: its bare .cuda() is every rank on GPU 0; the rest (a
    DistributedSampler with set_epoch, workers, a rank-0 save) is right and reported nothing."""
    src = """
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def train(rank, world_size):
    dist.init_process_group(\"nccl\", rank=rank, world_size=world_size)
    model = Net().cuda()
    model = DDP(model, device_ids=[rank])
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = model(x.cuda(rank)).sum()
            loss.backward()
            opt.step()
    if rank == 0:
        torch.save(model.state_dict(), \"m.pt\")

if __name__ == \"__main__\":
    mp.spawn(train, args=(4,), nprocs=4)
"""
    from allgpu.lint import check_source
    assert [(f.rule_id, f.line) for f in check_source(src, "t.py")] == [("PT002", 11)]
    fixed = src.replace("model = Net().cuda()", "torch.cuda.set_device(rank)\n    model = Net().cuda()")
    assert check_source(fixed, "t.py") == []


def test_pt003_iterable_datasets_take_no_sampler():
    head = ("import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\nfrom datasets import load_dataset\n"
            "import webdataset as wds\ndist.init_process_group('nccl')\nmodel = DDP(net)\n")
    loop = "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n"
    for ds in ("load_dataset('c4', split='train', streaming=True)", "wds.WebDataset(urls)",
               "load_dataset('c4', split='train').to_iterable_dataset()"):
        assert "PT003" not in ids(head + f"ds = {ds}\nloader = DataLoader(ds, batch_size=8, num_workers=2)\n" + loop)
    assert "PT003" in ids(head + "ds = load_dataset('c4', split='train')\n"
                                 "loader = DataLoader(ds, batch_size=8, num_workers=2)\n" + loop)


def test_pt003_wrapper_through_an_alias_and_kwargs_chosen_by_a_condition():
    src = """
import torch
import torch.distributed as dist
import torch.nn as nn
dist.init_process_group(backend="gloo")
kwargs = {'num_workers': 1, 'pin_memory': True} if use_cuda else {}
train_loader = torch.utils.data.DataLoader(train_set, batch_size=64, shuffle=True, **kwargs)
model = Net()
Distributor = nn.parallel.DistributedDataParallel if use_cuda else nn.parallel.DistributedDataParallelCPU
model = Distributor(model)
for x, y in train_loader:
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
"""
    assert "PT003" in ids(src)
    assert "PT003" not in ids(src.replace("shuffle=True, **kwargs", "sampler=DistributedSampler(train_set), **kwargs"))


def test_pt011_says_the_default_is_safe_from_torch_2_6():
    # nanoGPT's `torch.load(ckpt_path, map_location=device)`: on torch >= 2.6 that loads weights only, so
    # "unpickles arbitrary code" alone was untrue there
    from allgpu.lint import check_source
    (default,) = check_source("import torch\nstate = torch.load(p, map_location='cpu')\n")
    (explicit,) = check_source("import torch\nstate = torch.load(p, weights_only=False)\n")
    assert default.rule_id == explicit.rule_id == "PT011"
    assert "torch < 2.6" in default.message and "2.6" not in explicit.message
