"""One replica of ``allgpu run``: ``python -m allgpu.runtime.replica_main script.py args...`` runs the script as
``__main__`` under :func:`torch.distributed.elastic.multiprocessing.errors.record`, which writes an
uncaught exception's traceback to the error file the elastic agent reads, so the launcher can say which
replica failed and show its traceback.
"""

from __future__ import annotations

import os
import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record

from allgpu.errors import RestartError
from allgpu.runtime import env as launch_env
from allgpu.runtime.attempt_store import end_with, use_fresh_store
from allgpu.runtime.interrupt import SIGINT_WORDS, checkpoint_note
from allgpu.runtime.replicas import whole_lines


def _clean_exit(error: SystemExit) -> bool:
    return error.code is None or error.code == 0


@record
def main(argv: list[str]) -> None:
    """Run ``argv[0]`` with ``sys.argv = argv`` and the script's folder first on ``sys.path`` (as ``python script.py``)."""
    attempt = None
    if launch_env.read().fresh_store and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        try:
            attempt = use_fresh_store()  # a store for this attempt; ends this replica if another node restarts
        except RestartError as error:  # a restart that cannot gather the job: said plainly, not as a traceback
            end_with(error)
    whole_lines()  # the replicas' lines on the shared terminal never cut into each other ("valval 1.0\n 1.0\n")
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    clean = False
    try:
        runpy.run_path(script, run_name="__main__")
        clean = True
    except SystemExit as error:
        clean = _clean_exit(error)
        raise
    except KeyboardInterrupt:  # the launcher passes a Ctrl-C on to every replica: replica 0 alone reports it
        if os.environ.get("RANK", "0") != "0":  # quietly, and without leaving through replica 0's store (gone)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        print(f"allgpu: replica 0 interrupted ({SIGINT_WORDS}).{checkpoint_note()}", file=sys.stderr, flush=True)
        raise
    finally:
        # before the interpreter finalizes: no thread of ours may still be in a store call
        if attempt is not None and clean:
            attempt.finished(checkpoint_note())  # a node whose replicas all finished cannot follow a restart
        elif attempt is not None:
            attempt.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
