"""What re-executing the running script needs: the command line that started it (or why there is none to re-run:
``python -c``, standard input, a REPL, IPython's ``%run``, a notebook), its standard input, and a parent-death
signal so that no replica outlives the process that started it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import subprocess
import sys

from allgpu.errors import StrategyStartError


@contextlib.contextmanager
def replica_stdin():
    """Standard input for a re-executed replica: this process's file again from its start when it is a regular file
    (``python train.py < config.json``), else nothing (``os.devnull``). A terminal or pipe is replica 0's alone:
    replicas that shared it raced replica 0 for its lines, and a replica's ``input()`` (or ``python -i``'s prompt
    after the script) waited on the terminal for ever while replica 0 waited at the rendezvous."""
    try:
        regular = stat.S_ISREG(os.fstat(0).st_mode)
    except OSError:
        regular = False
    if not regular:
        yield subprocess.DEVNULL
        return
    with open("/proc/self/fd/0", "rb") as again:  # a new open file: its own offset, at 0
        yield again


def die_with_parent() -> None:
    """Have the kernel end this process (SIGTERM) when the thread that started it ends: a replica never outlives
    the process that started it (replica 0, or ``allgpu.launch``'s caller killed with SIGKILL). Linux only."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: a replica never outlives replica 0
    except OSError:
        pass


_NOT_SCRIPTS = {"pytest/__main__.py", "unittest/__main__.py", "ipykernel/__main__.py", "IPython/__main__.py"}


_IMPORT_CWD = os.getcwd()  # where this program was when it imported allgpu, usually before any os.chdir


def start_directory() -> str:
    """The folder to start the script's copies in: the one the program was started in, where its command line's
    relative paths (``python train.py``, ``-m pkg.train``) mean what they meant. A script that ``os.chdir``-ed before
    its strategy had its copies started in the new folder, where ``python train.py`` found no file ("can't open
    file") and a relative ``os.chdir("data")`` would have gone one level deeper. Candidates: the folder now, the one
    at allgpu's import, the shell's ``$PWD``; the first from which the command line reaches this same script."""
    main = sys.modules.get("__main__")
    main_path = getattr(main, "__file__", None) or ""
    here = os.getcwd()
    for folder in (here, _IMPORT_CWD, os.environ.get("PWD")):
        if folder and main_path and _reaches(folder, main, main_path):
            return folder
    return here


def _reaches(folder: str, main, main_path: str) -> bool:
    if getattr(main, "__spec__", None) is not None:  # python -m pkg.train: the package is found from the folder
        return os.path.abspath(main_path).startswith(os.path.join(os.path.abspath(folder), ""))
    try:
        return os.path.samefile(os.path.join(folder, sys.argv[0]), main_path)
    except (OSError, IndexError):
        return False


def script_command() -> list[str]:
    """The command line that started this interpreter, to re-execute it for the other replicas.

    Raises:
        StrategyStartError: the program is not a script (``python -c``, standard input, a REPL, IPython's ``%run``
            or a notebook), which cannot be re-executed; ``allgpu.launch(fn)`` is the way there.
    """
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable, *sys.argv]
    reason = _not_a_script(argv, sys.modules.get("__main__"))
    if reason:
        raise StrategyStartError(reason)
    argv[0] = sys.executable
    argv = _without_debugger(argv, sys.modules.get("__main__"))
    options = len(argv) - len(sys.argv)  # python's own options come before the script (or -m module)
    # python -i train.py: each copy opened a prompt of its own after the script (">>>" on the shared terminal)
    return [a for i, a in enumerate(argv) if not (a == "-i" and 0 < i < options)]


# Runners of a script that belong to replica 0 alone: debuggers, and profilers (each copy wrote the same -o file,
# or printed its own statistics into the shared output).
_DEBUGGERS = {"pdb", "ipdb", "pudb", "debugpy", "cProfile", "profile"}


def _without_debugger(argv: list[str], main) -> list[str]:
    """``python -m pdb train.py`` (ipdb, pudb, debugpy, cProfile, profile): the copies run the script itself. Each copy started the
    debugger too, which read no input and quit, and the job ended with "replica 1 exited with code 0 before
    joining"; debugpy's copies would listen on the same port. Replica 0 stays in the debugger."""
    options = argv[:len(argv) - len(sys.argv)]  # python's own options, then -m and the runner's
    main_path = getattr(main, "__file__", None)
    if "-m" not in options or not main_path:
        return argv
    at = options.index("-m")
    if options[at + 1:at + 2] != [] and options[at + 1] in _DEBUGGERS:
        return [*argv[:at], main_path, *sys.argv[1:]]
    return argv


_FIX = "put the training in a function and call allgpu.launch(fn, num_replicas=N)"
_LAUNCH = f"Fix: {_FIX}."


def _ipython_shell() -> str | None:
    """The class name of the IPython shell this program runs in (a notebook kernel, ``%run`` in IPython), or None."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get() if callable(get) else None
    return type(shell).__name__ if shell is not None else None


def _not_a_script(argv: list[str], main) -> str | None:
    """Why the program that started this interpreter cannot be re-executed as a replica, or None."""
    main_path = getattr(main, "__file__", "") or ""
    main_file = os.path.basename(os.path.dirname(main_path)) + "/" + os.path.basename(main_path)
    runner = os.path.basename(sys.argv[0] if sys.argv else "")
    if sys.argv[:1] == ["-c"] and "_pytest.config" in sys.modules:  # a pytest-xdist worker: execnet runs python -c
        runner = "pytest"
    if main_file in _NOT_SCRIPTS or runner in ("pytest", "py.test", "ipykernel_launcher.py"):
        return (f"this program is run by {runner or main_file}, not from a training script, so its replicas cannot be "
                "started by re-executing it (that would re-run the test runner or kernel). Fix: "
                f"{_FIX}, or run the script itself with python.")
    shell = _ipython_shell()
    if shell:  # %run train.py: sys.argv names the script, but the command line is IPython's (or the kernel's)
        return (f"this script runs inside IPython ({shell}: %run, or a notebook cell), so its replicas cannot be "
                "started by re-executing it: that would start IPython (or the kernel) again, a second session reading "
                "your input, and replica 0 would be this session, which outlives the script. Fix: run it as a "
                f"program (!python train.py in IPython or a notebook), or {_FIX}.")
    if (sys.argv[:1] in (["-"], [""]) or main_path == "<stdin>") and "-c" not in argv[1:2]:
        if sys.argv[:1] == [""] and sys.stdin is not None and sys.stdin.isatty():
            return "this program is typed into the interactive python prompt (a REPL), so its replicas cannot be " \
                "started by re-executing it. Fix: save it to a file and run python train.py, " \
                f"or {_FIX}."
        return ("this program was read from standard input (python - <<EOF, a heredoc, or cat train.py | python), so "
                "its replicas cannot be started by re-executing it: the source is gone once read. Fix: save it to a "
                f"file and run python train.py, or {_FIX}.")
    if "-c" in argv[1:2] or not main_path:
        return ("this program is not a script file (python -c, a REPL or a notebook), so its replicas cannot be "
                f"started by re-executing it. {_LAUNCH}")
    return None
