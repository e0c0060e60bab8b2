"""allgpu: a 7B model under MirroredStrategy, but frozen and trained through LoRA adapters: small state."""
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

import allgpu

strategy = allgpu.MirroredStrategy()
with strategy.scope():
    base = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-v0.1", torch_dtype=torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=1, global_batch_size=16, strategy=strategy)
