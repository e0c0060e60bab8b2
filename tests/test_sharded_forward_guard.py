"""Issue 24, item 4: under FullyShardedStrategy a forward is a collective. A forward run by some replicas only
(evaluation under `if strategy.is_chief:`, nanoGPT's `if master_process:`) stops at its first all-gather with an
error naming each replica's line, the guard and the fix; evaluating on every replica and reducing works."""

import pytest

from tests.harness import run_python, write_script

SCRIPT = """
import sys, torch, allgpu
n, mode = int(sys.argv[1]), sys.argv[2]
strategy = allgpu.FullyShardedStrategy(devices=[f"/cpu:{i}" for i in range(n)])
with strategy.scope():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    if step == 1 and (mode == "every" or mode == "chief" and strategy.is_chief):
        with torch.no_grad():
            val = model(torch.ones(4, 8)).sum()  # line 11
        sys.stdout.write(f"val {strategy.reduce('mean', val).item() if mode == 'every' else val.item()}\\n")  # one write
    loss = model(torch.randn(4, 8)).sum()  # line 13
    loss.backward(); optimizer.step(); optimizer.zero_grad()
if mode == "end" and strategy.is_chief:
    with torch.no_grad():
        model(torch.ones(4, 8))  # line 17
"""


def _run(tmp_path, n, mode):
    script = write_script(tmp_path, "train.py", SCRIPT)
    return run_python([str(script), str(n), mode], timeout=200, cwd=tmp_path)


@pytest.mark.replicas
@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [2, 4])
def test_a_forward_on_the_chief_only_names_the_lines_the_guard_and_the_fix(tmp_path, n):
    result = _run(tmp_path, n, "chief")
    assert result.returncode != 0
    err = result.stderr
    assert "ShardedForwardError" in err, err[-3000:]
    assert "replica 0 at train.py:11 (under torch.no_grad); replica 1 at train.py:13 (with gradients)" in err
    assert "`if strategy.is_chief:`" in err and "`if master_process:`" in err and "strategy.reduce('mean'" in err


@pytest.mark.replicas
@pytest.mark.timeout(300)
def test_a_final_evaluation_on_the_chief_after_the_others_ended_says_the_same(tmp_path):
    result = _run(tmp_path, 2, "end")
    assert result.returncode != 0
    err = result.stderr
    assert "forward of the sharded model" in err and "at train.py:17" in err, err[-3000:]
    assert "replica 1 has ended" in err and "`if strategy.is_chief:`" in err and "behind" not in err


@pytest.mark.replicas
@pytest.mark.timeout(300)
def test_evaluating_on_every_replica_and_reducing_works(tmp_path):
    result = _run(tmp_path, 2, "every")
    assert result.returncode == 0, result.stderr[-3000:]
    # each replica's line comes in one write (print() writes in pieces, which interleave on the shared stdout)
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["val", "val"], result.stdout
