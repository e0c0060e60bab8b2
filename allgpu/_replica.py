"""One replica of ``allgpu run``: ``python -m allgpu._replica script.py args...`` runs the script as
``__main__`` under :func:`torch.distributed.elastic.multiprocessing.errors.record`, which writes an
uncaught exception's traceback to the error file the elastic agent reads, so the launcher can say which
replica failed and show its traceback.
"""

from __future__ import annotations

import os
import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main(argv: list[str]) -> None:
    """Run ``argv[0]`` with ``sys.argv = argv`` and the script's folder first on ``sys.path`` (as ``python script.py``)."""
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
