"""Multi-GPU with nn.DataParallel."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
model = model.cuda()

data = TensorDataset(torch.randn(1024, 784), torch.randint(0, 10, (1024,)))
loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=4, pin_memory=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
