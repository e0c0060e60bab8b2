"""allgpu: halving the batch on every OOM under MirroredStrategy (AG004: sharding may be the better fix)."""
import torch

import allgpu

strategy = allgpu.MirroredStrategy()
with strategy.scope():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10))
    optimizer = torch.optim.Adam(model.parameters())
data = torch.utils.data.TensorDataset(torch.randn(4096, 1024), torch.randint(0, 10, (4096,)))
batch = 1024
while batch >= 8:
    try:
        allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=1, global_batch_size=batch,
                   strategy=strategy)
        break
    except torch.cuda.OutOfMemoryError:
        batch //= 2
        torch.cuda.empty_cache()
