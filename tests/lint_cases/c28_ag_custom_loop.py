"""allgpu custom loop: model in scope, distributed dataset, strategy.run and reduce."""
import torch
from torch import nn

import allgpu

GLOBAL_BATCH = 256
strategy = allgpu.MirroredStrategy()
with strategy.scope():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

dataset = torch.utils.data.TensorDataset(torch.randn(8192, 32), torch.randn(8192, 1))
dist_data = strategy.distribute_dataset(dataset, global_batch_size=GLOBAL_BATCH)


def train_step(batch):
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


for epoch in range(5):
    for batch in dist_data:
        loss = strategy.run(train_step, args=(batch,))
    print(epoch, strategy.reduce("mean", loss))
