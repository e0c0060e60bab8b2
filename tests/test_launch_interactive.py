"""Starting replicas from the places a user runs Python interactively: a notebook kernel (``allgpu.launch``),
IPython's ``%run``, a script that reads standard input. Each is a correct run or a typed allgpu error or warning
naming why and the fix; never a hang, a replica left behind, or a second interactive session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.harness import run_python, start_python, write_script

pytestmark = pytest.mark.timeout(120)


@pytest.mark.replicas
def test_launch_after_a_one_replica_strategy_in_the_same_kernel(tmp_path):
    """A notebook's flow: MirroredStrategy() on a machine without a GPU (one replica, on allgpu's world-of-one
    process group), then allgpu.launch(train, num_replicas=2). The forked replicas inherited the group without its
    Gloo threads and waited forever at their first collective; now 2 replicas run, and the kernel's one-replica
    strategy still works afterwards."""
    script = write_script(tmp_path, "kernel.py", """
        import allgpu, torch, torch.distributed as dist
        first = allgpu.MirroredStrategy(devices=["/cpu:0"])

        def train():
            strategy = allgpu.MirroredStrategy()
            return strategy.reduce("sum", torch.ones(1)).item()

        print("replicas", allgpu.launch(train, num_replicas=2), flush=True)
        print("after", dist.get_world_size(), first.reduce("sum", torch.ones(1)).item(), flush=True)
    """)
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = run_python([str(script)], timeout=90, cwd=tmp_path, env={"TMPDIR": str(temp)})
    assert result.returncode == 0, result.stderr
    assert "replicas [2.0, 2.0]" in result.stdout
    assert "after 1 1.0" in result.stdout
    assert not list(temp.glob("allgpu-errors-*")), "launch left its error folder in the temp folder"


@pytest.mark.replicas
def test_launch_replicas_end_when_the_kernel_is_killed(tmp_path):
    """A kernel restarted or killed (SIGKILL: no finally runs) left its forked replicas training on, orphaned, when
    they handle SIGINT (torch's parent-death signal for them), e.g. to save a checkpoint on Ctrl-C."""
    script = write_script(tmp_path, "kernel.py", """
        import os, signal, time, allgpu

        def train():
            signal.signal(signal.SIGINT, lambda *_: print("Ctrl-C: saving a checkpoint", flush=True))
            print("replica pid", os.getpid(), flush=True)
            time.sleep(300)

        allgpu.launch(train, num_replicas=2)
    """)
    kernel = start_python([str(script)], cwd=tmp_path)
    pids = []
    try:
        while len(pids) < 2:
            line = kernel.stdout.readline()
            assert line, "the launcher ended before its replicas started"
            if line.startswith("replica pid"):
                pids.append(int(line.split()[-1]))
        kernel.kill()
        kernel.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in pids), "replicas outlived the killed kernel"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.replicas
def test_run_in_ipython_is_refused_not_re_executing_ipython(tmp_path):
    """``%run train.py`` in an IPython session: sys.argv names the script but the command line is IPython's, so the
    copy was a second IPython session reading the user's input (here it took the session's 'exit' and ended before
    joining, failing the run). Now a StrategyStartError (fallback='error') naming IPython and the fixes."""
    write_script(tmp_path, "train.py", """
        import allgpu
        strategy = allgpu.MirroredStrategy(num_replicas=2, fallback="error")
        print("replicas", strategy.num_replicas_in_sync)
    """)
    result = run_python(["-m", "IPython", "--no-banner", "--simple-prompt", "--colors=NoColor"], cwd=tmp_path,
                        stdin="%run train.py\nprint('session goes on')\nexit\n", timeout=90)
    out = result.stdout + result.stderr
    assert "StrategyStartError" in out and "inside IPython" in out and "!python train.py" in out, out
    assert "session goes on" in out and "before joining" not in out


@pytest.mark.replicas
def test_a_script_reading_its_input_before_the_strategy(tmp_path):
    """``name = input()`` before the strategy: the re-executed replica shared replica 0's terminal or pipe and waited
    on it for ever (replica 0 waited at the rendezvous until the timeout). Now it gets no input, and replica 0 says
    why within seconds; a file on standard input is read again by each replica: a correct 2-replica run."""
    script = write_script(tmp_path, "train.py", """
        name = input()
        import allgpu
        strategy = allgpu.MirroredStrategy(num_replicas=2, timeout=60)
        print("run", name, "replicas", strategy.num_replicas_in_sync, flush=True)
    """)
    (tmp_path / "answers.txt").write_text("exp1\n")
    with open(tmp_path / "answers.txt") as answers:
        result = run_python_stdin(script, answers)
    assert result.returncode == 0 and result.stdout.count("run exp1 replicas 2") == 2, result.stdout + result.stderr
    held = start_python([str(script)], cwd=tmp_path, stdin=subprocess.PIPE)
    held.stdin.write("exp2\n")
    held.stdin.flush()  # and kept open, as a terminal is
    try:
        out, _ = held.communicate(timeout=50)
    finally:
        held.kill()
    assert held.returncode != 0 and "replica 1 exited with code 1 before creating its strategy" in out, out
    assert "EOFError" in out and "answers.txt" in out


def run_python_stdin(script, stdin):
    return subprocess.run([sys.executable, str(script)], stdin=stdin, capture_output=True, text=True, timeout=60,
                          cwd=script.parent)


NOTEBOOK = ['''
import torch, allgpu
from torch.utils.data import TensorDataset
''', '''
def train():
    torch.manual_seed(0)
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(x, (x[:, 0] > 0).long())
    allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=2, global_batch_size=32, strategy=strategy)
    print("replica", strategy.replica_id_in_sync, "of", strategy.num_replicas_in_sync, "done")
    return [p.detach() for p in model.parameters()]
''', '''
two = allgpu.launch(train, num_replicas=2)
''', '''
one = allgpu.launch(train, num_replicas=1)
print("difference", max((a - b).abs().max().item() for a, b in zip(two[0], one[0])))
''', '''
strategy = allgpu.MirroredStrategy(devices=["/cpu:0"])
with strategy.scope():
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 8)
allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), TensorDataset(x, (x[:, 0] > 0).long()), epochs=1,
           global_batch_size=32, strategy=strategy)
''', '''
def ask():
    return input("learning rate? ")
try:
    allgpu.launch(ask, num_replicas=2)
except allgpu.errors.ReplicaFailedError as error:
    print("input refused:", "read the value before launch" in str(error))
''']


@pytest.mark.replicas
def test_fit_in_a_notebook_through_launch(tmp_path):
    """A real Jupyter kernel (nbclient, as `jupyter nbconvert --execute` runs one): a function defined in a cell,
    trained by fit on 2 replicas and on 1 through allgpu.launch. The replicas' prints reached the notebook cut into
    words, each a message of its own, and fit's progress lines not at all (rich sent them as Jupyter displays,
    which ipykernel drops from a forked process). 2 replicas equal 1. Then fit in the kernel itself."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in NOTEBOOK])
    NotebookClient(notebook, timeout=90, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    launched = notebook.cells[2].outputs
    printed = [o["text"] for o in launched if o["output_type"] == "stream" and o["name"] == "stdout"]
    assert sorted(printed) == ["replica 0 of 2 done\n", "replica 1 of 2 done\n"], launched
    progress = "".join(o["text"] for o in launched if o["output_type"] == "stream" and o["name"] == "stderr")
    assert "epoch 2/2" in progress and "loss" in progress and "\x1b" not in progress, launched
    difference = float(notebook.cells[3].outputs[-1]["text"].split()[-1])
    assert difference < 1e-5
    # fit in the kernel itself: rich's Jupyter display needs ipywidgets; without it the epoch showed as an empty
    # display under an "install ipywidgets" warning. Text lines now.
    direct = "".join(o.get("text", "") for o in notebook.cells[4].outputs if o["output_type"] == "stream")
    assert "epoch 1/1" in direct and "loss" in direct and "ipywidgets" not in direct, notebook.cells[4].outputs
    # input() in a replica: ipykernel's asks the notebook through the kernel's sockets; the cell waited for ever
    assert "input refused: True" in notebook.cells[5].outputs[-1]["text"], notebook.cells[5].outputs


@pytest.mark.replicas
def test_a_script_that_changes_folder_before_its_strategy(tmp_path):
    """os.chdir("data") before the strategy: the copy was started in data/, where `python train.py` found no file.
    It is started in the folder the program was started in, and its own chdir leads it to the same data."""
    write_script(tmp_path, "train.py", """
        import os, allgpu
        os.chdir("data")
        strategy = allgpu.MirroredStrategy(num_replicas=2, fallback="error")
        print("replica", strategy.replica_id_in_sync, "read", open("x.txt").read(), flush=True)
    """)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("digits")
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = run_python(["train.py"], cwd=tmp_path, timeout=60, env={"TMPDIR": str(temp)})
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["replica 0 read digits", "replica 1 read digits"]
    # every run left an empty allgpu-errors-* folder in /tmp (9,613 on this machine)
    assert not list(temp.glob("allgpu-errors-*"))


@pytest.mark.replicas
def test_spawn_from_a_script_without_a_main_guard(tmp_path):
    """spawn re-imports the script in each replica, which ran the unguarded launch() again: each replica died in
    multiprocessing's bootstrapping check (a bare RuntimeError). Now a StrategyStartError naming the guard."""
    write_script(tmp_path, "train.py", """
        import allgpu

        def train():
            return 1

        print(allgpu.launch(train, num_replicas=2, start_method="spawn"))
    """)
    result = run_python(["train.py"], cwd=tmp_path, timeout=90)
    assert result.returncode != 0
    assert "StrategyStartError" in result.stderr and 'if __name__ == "__main__":' in result.stderr, result.stderr
    assert "bootstrapping phase" not in result.stderr


def _cell_function():
    """A function as a notebook cell defines it: its module has no file."""
    namespace = {"__name__": "__main_cell__"}
    exec("def train():\n    return 1\n", namespace)
    return namespace["train"]


def test_launch_after_the_notebook_used_the_gpu_names_a_fix_that_works(monkeypatch):
    """CUDA initialised in the kernel: launch picks spawn, which cannot take a cell's function. The error told the
    user to pass start_method='fork', which cannot follow CUDA either; fork asked for explicitly failed in each
    replica ("Cannot re-initialize CUDA in forked subprocess"). Both are refused up front with the fix that works."""
    import torch

    import allgpu
    from allgpu.errors import StrategyStartError

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(StrategyStartError, match="restart the kernel") as error:
        allgpu.launch(_cell_function(), devices=["/cpu:0", "/cpu:1"])
    assert "start_method='fork' (the default" not in str(error.value)
    with pytest.raises(StrategyStartError, match="Cannot re-initialize CUDA"):
        allgpu.launch(_cell_function(), devices=["/cpu:0", "/cpu:1"], start_method="fork")


@pytest.mark.replicas
def test_a_return_value_pickle_cannot_copy_is_named_as_such():
    """A function returning a lambda failed as "replica 0 raised ... Can't pickle local object", as if training had."""
    import allgpu
    from allgpu.errors import ReplicaFailedError

    with pytest.raises(ReplicaFailedError, match="cannot be sent back to the caller") as error:
        allgpu.launch(_returns_a_lambda, devices=["/cpu:0", "/cpu:1"], start_method="fork")
    assert "UnsupportedError" in error.value.remote_traceback and "state_dict()" in error.value.remote_traceback


def _returns_a_lambda():
    return lambda: 1
