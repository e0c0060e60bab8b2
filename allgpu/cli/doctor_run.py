"""``allgpu doctor --run script.py [args]``: run a training script under the step monitor for a bounded number
of steps and print why its devices idle.

The script runs in this process as ``__main__`` (as ``python script.py`` would), inside
``with allgpu.monitor.session.started(...)``, so ``allgpu.fit`` monitors one epoch of at most ``steps`` steps. A ``MirroredStrategy`` in the script re-executes this very command for its other replicas, so each
replica is monitored too; replica 0 prints the table and the diagnosis. It lives in the CLI layer (formerly
``allgpu/doctor/run_script.py``) because it joins two tools: the doctor command and the step monitor.
"""

from __future__ import annotations

import os
import runpy
import sys

from allgpu.monitor import session as monitor_session


def run_monitored(script: str, args: list[str], *, steps: int = 50, report_dir: str | None = None,
                  device_memory: int | None = None) -> int:
    """Run ``script`` monitored. Returns 0 when the diagnosis is clean, 1 with findings or when the script never
    called ``fit``, or the script's own exit code when it failed. ``device_memory`` (bytes): the device size the
    ``needs-sharding`` rule plans against, None for the device's own."""
    if not os.path.isfile(script):
        print(f"allgpu doctor --run: {script!r} is not a file. Fix: allgpu doctor --run path/to/train.py [args]",
              file=sys.stderr)
        return 2
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    with monitor_session.started(steps, report_dir, device_memory) as session:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                return exc.code if isinstance(exc.code, int) else 1
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() != 0:
        return 0
    if session.fit_calls == 0:
        print("allgpu doctor --run: the script never called allgpu.fit(), so nothing was monitored. Fix: train "
              "with allgpu.fit(...), or time your own loop with allgpu.monitor.StepMonitor.", file=sys.stderr)
        return 1
    if not session.reports:
        print("allgpu doctor --run: fit() ran no complete epoch, so there is no diagnosis.", file=sys.stderr)
        return 1
    report = session.reports[-1]
    print(f"\nallgpu doctor --run: {script}, {steps} steps monitored at most")
    report.print()
    return 0 if report.healthy else 1
