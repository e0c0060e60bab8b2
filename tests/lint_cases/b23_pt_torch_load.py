"""Resuming from a checkpoint with a plain torch.load."""
import torch
import torch.nn as nn

model = nn.Linear(10, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
state = torch.load("checkpoint.pt", map_location="cpu")
model.load_state_dict(state["model"])
optimizer.load_state_dict(state["optimizer"])
for step in range(10):
    loss = model(torch.randn(2, 10)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
