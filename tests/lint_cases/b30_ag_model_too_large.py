"""allgpu: a 13B checkpoint fine-tuned under MirroredStrategy: 13e9 x 16 bytes will not fit any one GPU."""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import allgpu

MODEL = "meta-llama/Llama-2-13b-hf"

strategy = allgpu.MirroredStrategy()
tokenizer = AutoTokenizer.from_pretrained(MODEL)
with strategy.scope():
    model = AutoModelForCausalLM.from_pretrained(MODEL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=1, global_batch_size=32, strategy=strategy)
