"""allgpu: a custom module class instantiated in main() outside the scope."""
import torch
from torch import nn

import allgpu


class Classifier(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, 128), nn.GELU(), nn.Linear(128, n_out))

    def forward(self, x):
        return self.body(x)


def main():
    strategy = allgpu.MultiWorkerMirroredStrategy()
    net = Classifier(32, 4)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    allgpu.fit(net, optimizer, nn.CrossEntropyLoss(), data, epochs=2, global_batch_size=32, strategy=strategy)


if __name__ == "__main__":
    main()
