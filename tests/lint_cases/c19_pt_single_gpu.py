"""A single-GPU script (no torch.distributed): cuda:0 is fine here."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 1)).to(device)
data = TensorDataset(torch.randn(2000, 20), torch.randn(2000, 1))
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
opt = torch.optim.Adam(model.parameters())
for epoch in range(20):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
torch.save(model.state_dict(), "model.pt")
model.load_state_dict(torch.load("model.pt", weights_only=True))
