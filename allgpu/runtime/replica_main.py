"""One replica of ``allgpu run``: ``python -m allgpu.runtime.replica_main script.py args...`` runs the script as
``__main__`` under :func:`torch.distributed.elastic.multiprocessing.errors.record`, which writes an
uncaught exception's traceback to the error file the elastic agent reads, so the launcher can say which
replica failed and show its traceback.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
from datetime import timedelta

from torch.distributed.elastic.multiprocessing.errors import record

from allgpu.runtime import env as launch_env
from allgpu.runtime.interrupt import SIGINT_WORDS, checkpoint_note



def use_fresh_store(env: dict = os.environ, timeout_s: float = 300.0) -> None:
    """Point ``init_process_group(env://)`` at a new store for this attempt, hosted by global rank 0.

    PyTorch's static rendezvous gives every attempt the agent's one TCPStore without a per-attempt prefix,
    so after a restart the group reads the previous attempt's keys and hangs (pytorch/pytorch#135712).
    Rank 0 (on node 0, whose address is ``MASTER_ADDR``) picks a free port and publishes it in the agent's
    store under a key named by the attempt; the others read it; ``TORCHELASTIC_USE_AGENT_STORE=False``
    then makes rank 0's ``init_process_group`` host the store there, as it does without an agent.
    """
    from torch.distributed import TCPStore

    agent = TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=timeout_s))
    key = f"allgpu/{env.get('TORCHELASTIC_RUN_ID', '')}/attempt_{env['TORCHELASTIC_RESTART_COUNT']}/master_port"
    if env["RANK"] == "0":
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        agent.set(key, str(port))
    else:
        port = int(agent.get(key))
    env["MASTER_PORT"] = str(port)
    env["TORCHELASTIC_USE_AGENT_STORE"] = "False"


@record
def main(argv: list[str]) -> None:
    """Run ``argv[0]`` with ``sys.argv = argv`` and the script's folder first on ``sys.path`` (as ``python script.py``)."""
    if launch_env.read().fresh_store and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        use_fresh_store()
    # Line-buffered, not unbuffered (`python -u`): a line reaches the terminal as soon as it ends, in one write,
    # so the replicas' lines on the shared terminal never cut into each other ("valval 1.0\n 1.0\n").
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except KeyboardInterrupt:  # the launcher passes a Ctrl-C on to every replica: replica 0 alone reports it
        if os.environ.get("RANK", "0") != "0":  # quietly, and without leaving through replica 0's store (gone)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        print(f"allgpu: replica 0 interrupted ({SIGINT_WORDS}).{checkpoint_note()}", file=sys.stderr, flush=True)
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
