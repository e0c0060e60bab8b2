"""allgpu: the canonical usage."""
import torch
import torch.nn as nn

import allgpu

strategy = allgpu.MirroredStrategy()
with strategy.scope():
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
data = torch.utils.data.TensorDataset(torch.randn(512, 20), torch.randint(0, 2, (512,)))
allgpu.fit(model, optimizer, loss_fn, data, epochs=3, global_batch_size=64, strategy=strategy)
