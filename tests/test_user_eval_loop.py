"""A hand-written evaluation loop as PyTorch's MNIST example writes it (``correct += ...``, ``test_loss += ...``,
then divided by the dataset's length), ported to ``distribute_dataset`` as docs/strategies.md says: each replica
sees its share only, ``strategy.reduce("sum", ...)`` makes the one-replica figures, and ``drop_remainder=False``
keeps the examples past the last full batch. 2 replicas, 25 examples at a global batch of 12 (one left over)."""

import pytest
import torch

import allgpu

N, BATCH = 25, 12


def _model_and_data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(N, 4, generator=g), torch.randint(0, 3, (N,), generator=g)
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.copy_(torch.randn(3, 4, generator=g))
        model.bias.zero_()
    return model, torch.utils.data.TensorDataset(x, y)


def _evaluate(strategy):
    model, data = _model_and_data()
    correct, test_loss, seen = 0, 0.0, 0
    with torch.no_grad():
        for x, y in strategy.distribute_dataset(data, global_batch_size=BATCH, shuffle=False, drop_remainder=False,
                                                num_workers=0):
            output = model(x)
            test_loss += torch.nn.functional.cross_entropy(output, y, reduction="sum").item()
            correct += (output.argmax(dim=1) == y).sum().item()
            seen += y.shape[0]
    local = (correct, seen)
    correct = int(strategy.reduce("sum", torch.tensor(correct)))
    test_loss = strategy.reduce("sum", torch.tensor(test_loss)).item() / len(data)
    seen = int(strategy.reduce("sum", torch.tensor(seen)))
    return local, correct, test_loss, seen


def _two():
    strategy = allgpu.MirroredStrategy()
    try:
        return _evaluate(strategy)
    finally:
        strategy.close()


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_a_hand_written_evaluation_loop_reduced_by_sum_equals_one_replica():
    model, data = _model_and_data()
    with torch.no_grad():
        output = model(data.tensors[0])
        ref_loss = torch.nn.functional.cross_entropy(output, data.tensors[1], reduction="sum").item() / N
        ref_correct = int((output.argmax(dim=1) == data.tensors[1]).sum())
    results = allgpu.launch(_two, num_replicas=2)
    locals_ = [r[0] for r in results]
    assert sum(seen for _, seen in locals_) == N and all(seen < N for _, seen in locals_)  # each saw its share
    for _, correct, test_loss, seen in results:
        assert (correct, seen) == (ref_correct, N)
        assert abs(test_loss - ref_loss) < 1e-5
