"""``allgpu run``: start a training script's replicas on PyTorch's elastic launcher (see ``allgpu.runtime.elastic``)."""

from __future__ import annotations

import argparse
import os
import re
import sys

from allgpu.cli.arguments import exit_code_for, non_negative_int, positive_int
from allgpu.errors import AllGpuError, ArgumentError, ScriptNotFoundError

_INTERPRETER = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?$")  # python, python3, python3.11, a path to one

_EPILOG = """\
examples:
  allgpu run train.py --epochs 3                      one replica per visible GPU
  allgpu run --cpu-replicas 2 train.py                two CPU replicas (Gloo), no GPU needed
  allgpu run --nnodes 2 --rdzv-endpoint host0:29400 --rdzv-id job1 train.py     on each of two machines
  TF_CONFIG='{...}' allgpu run --tf-config train.py   nodes, node rank and endpoint from TF_CONFIG

With no GPU, --nproc-per-node auto is an error (not a silent CPU run): pass --cpu-replicas K.
A single-node run binds the rendezvous to 127.0.0.1 on a free port unless --rdzv-endpoint is given.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run",
        help="run a script's replicas on the elastic launcher (torchrun with allgpu defaults)",
        description="Run SCRIPT once per replica with torchrun's environment, restart on failure, "
        "and report which replica failed with its traceback.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nnodes", default="1", metavar="N|MIN:MAX", help="number of machines (default 1)")
    p.add_argument(
        "--nproc-per-node", default="auto", metavar="auto|K",
        help="replicas per machine; auto = one per visible GPU (default auto)",
    )
    p.add_argument("--cpu-replicas", type=positive_int, metavar="K", help="run K replicas per machine on the CPU (Gloo)")
    p.add_argument(
        "--rdzv-endpoint", metavar="HOST:PORT",
        help="rendezvous address every machine can reach (default 127.0.0.1 on a free port, one machine only)",
    )
    p.add_argument("--rdzv-id", metavar="ID", help="job id, the same on every machine of one job")
    p.add_argument(
        "--node-rank", type=non_negative_int, metavar="R",
        help="this machine's fixed rank (static rendezvous; node 0 hosts the store at --rdzv-endpoint)",
    )
    p.add_argument("--max-restarts", type=non_negative_int, default=0, metavar="R", help="restart the job up to R times (default 0)")
    p.add_argument(
        "--monitor-interval", type=float, default=0.1, metavar="S", help="seconds between replica health checks"
    )
    p.add_argument(
        "--tf-config", action="store_true", help="take --nnodes, --node-rank and --rdzv-endpoint from TF_CONFIG"
    )
    p.add_argument("script", help="the Python training script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return p


def script_and_args(script: str, script_args: list[str]) -> tuple[str, list[str]]:
    """``allgpu run python train.py`` as ``srun python train.py`` and ``mpirun -np 2 python train.py`` are typed:
    replicas run under this Python (``sys.executable``), so a leading interpreter name is dropped.

    Raises:
        ScriptNotFoundError: an interpreter followed by an option (``python -m pkg``) instead of a script.
        ArgumentError: a Jupyter notebook (``.ipynb``): its JSON is not Python (each replica failed with a bare
            ``NameError: name 'null' is not defined``).
    """
    if script.endswith(".ipynb") or (_INTERPRETER.match(os.path.basename(script)) and script_args
                                     and script_args[0].endswith(".ipynb")):
        notebook = script if script.endswith(".ipynb") else script_args[0]
        raise ArgumentError(
            f"{notebook} is a Jupyter notebook: allgpu run starts a Python script in each replica, and a notebook's "
            "JSON is not Python. Fix: in the notebook, put the training in a function and call "
            "allgpu.launch(train, num_replicas=N) from a cell (docs/launching.md); or save its code as a script "
            f"(`jupyter nbconvert --to script {notebook}`, then drop its get_ipython() lines: magics and `!` shell "
            "commands do not run under python) and allgpu run that.")
    if not _INTERPRETER.match(os.path.basename(script)) or not script_args:
        return script, script_args
    if script_args[0].startswith("-"):
        raise ScriptNotFoundError(f"{script} {script_args[0]} ...: allgpu run starts a script file under its own "
                                  f"Python ({sys.executable}), without interpreter options or -m. Fix: allgpu run "
                                  "[options] train.py [args]")
    return script_args[0], script_args[1:]


def run(args: argparse.Namespace) -> int:
    from allgpu.runtime import elastic

    try:
        script, script_args = script_and_args(args.script, args.script_args)
        return elastic.run(
            script,
            script_args,
            nproc_per_node=args.nproc_per_node,
            nnodes=args.nnodes,
            rdzv_endpoint=args.rdzv_endpoint,
            rdzv_id=args.rdzv_id,
            node_rank=args.node_rank,
            max_restarts=args.max_restarts,
            monitor_interval=args.monitor_interval,
            cpu_replicas=args.cpu_replicas,
            tf_config=args.tf_config,
        )
    except (AllGpuError, FileNotFoundError) as exc:
        print(f"allgpu run: {exc}", file=sys.stderr)
        return exit_code_for(exc)
