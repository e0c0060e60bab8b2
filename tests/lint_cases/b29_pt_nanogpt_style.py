"""nanoGPT-style trainer: DDP done right (no_sync via require_backward_grad_sync, master-only save), but the
resume path unpickles the checkpoint with a bare torch.load."""
import os
import time

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
gradient_accumulation_steps = 5 * 8
batch_size = 12
max_iters = 600000
init_from = "resume"
device = "cuda"
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True

model = GPT(GPTConfig())
if init_from == "resume":
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
    model.load_state_dict(checkpoint["model"])
model.to(device)
optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cuda")
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])

X, Y = get_batch("train")
iter_num = 0
while iter_num < max_iters:
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % 2000 == 0 and master_process:
        torch.save({"model": model.module.state_dict() if ddp else model.state_dict()},
                   os.path.join(out_dir, "ckpt.pt"))
    iter_num += 1
if ddp:
    destroy_process_group()
