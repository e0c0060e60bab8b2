"""Hugging Face Accelerate handles the devices, sharding and accumulation."""
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(gradient_accumulation_steps=4)
model = torch.nn.Linear(16, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(1024, 16), torch.randint(0, 2, (1024,)))
loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(3):
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
accelerator.wait_for_everyone()
accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
