"""Issue 13, item 5: lint suggests FullyShardedStrategy for a model too large to mirror (AG003), and the static
parameter count it rests on (allgpu/lint/model_size.py) matches what torch builds."""

import ast
import textwrap

import pytest
import torch

from allgpu.lint import check_source
from allgpu.lint.model_size import ParamCounter, size_in_name
from allgpu.lint.resolve import Module

HEAD = """
import argparse
import torch
import torch.nn as nn
import allgpu
from transformers import AutoModelForCausalLM, AutoTokenizer
strategy = allgpu.MirroredStrategy()
"""
TRAIN = """
with strategy.scope():
    model = {model}
    optimizer = {optimizer}
allgpu.fit(model, optimizer, nn.CrossEntropyLoss(), data, epochs=1, global_batch_size=8, strategy=strategy)
"""


def ag003(src):
    return [f for f in check_source(textwrap.dedent(src)) if f.rule_id == "AG003"]


def script(model, optimizer="torch.optim.AdamW(model.parameters(), lr=2e-5)", head=HEAD, extra=""):
    return head + extra + TRAIN.format(model=model, optimizer=optimizer)


def test_checkpoint_names():
    assert size_in_name("meta-llama/Llama-2-7b-hf") == 7e9 and size_in_name("EleutherAI/gpt-j-6B") == 6e9
    assert size_in_name("mistralai/Mixtral-8x7B-v0.1") == 56e9 and size_in_name("bigscience/bloom-7b1") == 7.1e9
    assert size_in_name("facebook/opt-1.3b") == 1.3e9 and size_in_name("Qwen/Qwen2.5-72B-Instruct") == 72e9
    assert [size_in_name(n) for n in ("bert-base-uncased", "gpt2-xl", "bigscience/bloom-560m", "net_v2b")] == \
        [None] * 4


@pytest.mark.parametrize("model,extra", [
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")', ""),
    ("AutoModelForCausalLM.from_pretrained(MODEL)", 'MODEL = "tiiuae/falcon-40b"\n'),
    ("AutoModelForCausalLM.from_pretrained(args.model_name)",
     'p = argparse.ArgumentParser()\np.add_argument("--model-name", default="meta-llama/Llama-2-13b-hf")\n'
     "args = p.parse_args()\n"),
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf", torch_dtype=torch.bfloat16)', ""),
])
def test_ag003_flags_a_large_checkpoint_under_mirrored(model, extra):
    found = ag003(script(model, extra=extra))
    assert len(found) == 1, found
    f = found[0]
    assert f.severity == "warning" and "allgpu.FullyShardedStrategy()" in f.message and f.line == model_line(extra)


def model_line(extra):
    return (HEAD + extra).count("\n") + 3  # the `model = ...` line inside the scope


def test_ag003_figures_follow_the_shared_arithmetic():
    f = ag003(script('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")'))[0]
    # 7e9 float32 parameters x (parameter + gradient + two AdamW moments) = 112e9 bytes = 104.31 GiB.
    assert "about 7.0B parameters" in f.message and "104.31 GiB on every replica under MirroredStrategy" in f.message
    assert "at least 2 such GPUs" in f.message
    sgd = ag003(script('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")',
                       optimizer="torch.optim.SGD(model.parameters(), lr=0.1)"))[0]
    assert "SGD state (0 per parameter)" in sgd.message and "96.86 GiB" in sgd.message  # 13e9 x 8 bytes


@pytest.mark.parametrize("model,extra,optimizer", [
    ('AutoModelForCausalLM.from_pretrained("facebook/opt-1.3b")', "", None),  # 20.8 GB: fits an 80 GiB GPU
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.bfloat16)', "", None),
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf", load_in_4bit=True)', "", None),
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf", device_map="auto")', "", None),
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")', "from peft import get_peft_model\n", None),
    ('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")', "", "make_optimizer(model)"),  # unknown
    ('AutoModelForCausalLM.from_pretrained(name)', "", None),  # the size is not in the source
    ('AutoModelForCausalLM.from_pretrained("gpt2-xl")', "", None),
])
def test_ag003_quiet(model, extra, optimizer):
    src = script(model, extra=extra) if optimizer is None else script(model, optimizer, extra=extra)
    if optimizer is not None:
        src = src.replace("allgpu.fit(", "trainer.train(")  # neither an optimizer nor fit: no training seen
    assert ag003(src) == []


def test_ag003_quiet_when_sharded_frozen_or_not_allgpu():
    big = 'AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")'
    assert ag003(script(big).replace("MirroredStrategy", "FullyShardedStrategy")) == []
    assert ag003(script(big) + "for p in model.base.parameters():\n    p.requires_grad = False\n") == []
    assert ag003(script(big).replace("strategy = allgpu.MirroredStrategy()", "strategy = None")) == []
    tokenizer_only = HEAD + 'tok = AutoTokenizer.from_pretrained("meta-llama/Llama-2-70b-hf")\n' + \
        "opt = torch.optim.AdamW(params)\n"
    assert ag003(tokenizer_only) == []
    assert ag003(script(big).replace("allgpu.MirroredStrategy()", "allgpu.OneDeviceStrategy('cuda:0')"))  # one copy


LAYERS = """
D = {width}
LAYERS = {layers}


class Block(nn.Module):
    def __init__(self, d=D, mult=4):
        super().__init__()
        self.up = nn.Linear(d, mult * d)
        self.down = nn.Linear(mult * d, d, bias=False)


class Net(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.emb = nn.Embedding(vocab, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.head = nn.Linear(D, vocab, bias=False)
        self.head.weight = self.emb.weight
"""


def test_ag003_counts_literal_layers_against_the_threshold():
    # Per block 8 d^2 + 4d; d = 8192, 12 blocks: 6.44e9 + embedding 0.41e9 = 6.85e9 parameters x 16 bytes.
    found = ag003(script("Net(vocab=50000)", extra=LAYERS.format(width=8192, layers=12)))
    assert len(found) == 1 and "`Net` (its layers) has about 6.9B parameters" in found[0].message
    assert ag003(script("Net(vocab=50000)", extra=LAYERS.format(width=8192, layers=4))) == []  # 2.6e9: fits


def test_the_static_count_equals_torch_s(tmp_path):
    src = textwrap.dedent("""
    from dataclasses import dataclass
    import torch.nn as nn

    @dataclass
    class Config:
        vocab: int = 300
        n_layer: int = 2
        n_embd: int = 24
        bias: bool = True

    class Attention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    class Block(nn.Module):
        def __init__(self, config, kernel=3):
            super().__init__()
            self.attn = Attention(config)
            self.conv = nn.Conv1d(config.n_embd, config.n_embd, kernel, groups=4)
            layers = []
            for _ in range(2):
                layers.append(nn.Linear(config.n_embd, config.n_embd))
            self.mlp = nn.Sequential(*layers)

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight

    model = GPT(Config(n_layer=3, n_embd=32))
    """)
    mod = Module(ast.parse(src), src)
    namespace: dict = {}
    path = tmp_path / "model_def.py"
    path.write_text(src)
    exec(compile(src, str(path), "exec"), namespace)  # noqa: S102  (our own test source)
    real = sum(p.numel() for p in namespace["model"].parameters())
    assert ParamCounter(mod).params(mod.assigns["model"][0]) == real
    assert isinstance(namespace["model"], torch.nn.Module)


@pytest.mark.parametrize("handler,fires", [
    ("except torch.cuda.OutOfMemoryError:\n        batch //= 2", True),
    ("except (ValueError, torch.OutOfMemoryError):\n        batch //= 2", True),
    ("except RuntimeError as e:\n        if 'out of memory' in str(e):\n            batch //= 2", True),
    ("except RuntimeError as e:\n        print('failed', e)", False),
    ("except KeyboardInterrupt:\n        pass", False),
])
def test_ag004_an_oom_handler_under_mirrored(handler, fires):
    src = HEAD + "batch = 64\nwhile True:\n    try:\n        allgpu.fit(model, opt, loss, data, epochs=1, " \
        "global_batch_size=batch, strategy=strategy)\n        break\n    " + handler + "\n"
    found = [f for f in check_source(src) if f.rule_id == "AG004"]
    assert [f.severity for f in found] == (["info"] if fires else [])
    sharded = src.replace("MirroredStrategy", "FullyShardedStrategy")
    assert not [f for f in check_source(sharded) if f.rule_id == "AG004"]


def test_ag003_says_meta_when_the_parameters_alone_exceed_the_gpu():
    f = ag003(script('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")'))[0]
    assert "built under torch.device('meta')" in f.message  # 280 GB of float32 parameters
    f = ag003(script('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")'))[0]
    assert "torch.device('meta')" not in f.message  # 52 GB of parameters fit; with their state they do not


def test_ag003_under_central_storage_counts_no_optimizer_state():
    big = 'AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")'
    src = script(big).replace("allgpu.MirroredStrategy()", "allgpu.CentralStorageStrategy()")
    f = ag003(src)[0]
    assert "with gradients and gradients" not in f.message and "96.86 GiB" in f.message  # 13e9 x (4 + 4) bytes
    assert ag003(script('AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")').replace(
        "allgpu.MirroredStrategy()", "allgpu.CentralStorageStrategy()")) == []  # 56 GB: fits
