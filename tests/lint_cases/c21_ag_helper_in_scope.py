"""allgpu: model from a helper, in a scope held in a variable; a reference model outside is never trained."""
import torch
from torch import nn

import allgpu


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)


def make_model():
    return Net()


def main():
    strategy = allgpu.MirroredStrategy(num_replicas=2)
    reference = Net()
    reference.load_state_dict(torch.load("reference.pt", weights_only=True))
    reference.eval()
    scope = strategy.scope()
    with scope:
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    allgpu.fit(model, opt, nn.CrossEntropyLoss(), data, epochs=1, global_batch_size=16, strategy=strategy)


if __name__ == "__main__":
    main()
