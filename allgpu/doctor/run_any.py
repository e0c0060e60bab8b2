"""``allgpu doctor --run script.py [args]`` for any script (TensorFlow, Keras, JAX, PyTorch): run it as a child
process, keep and echo its output, sample every GPU through NVML while it runs, lint its source, read the
environment, and combine all of it into one verdict (:mod:`allgpu.doctor.verdict`).

Scripts that use allgpu keep the step-monitor path (:mod:`allgpu.doctor.run_script`); :func:`is_allgpu_script`
decides. Exit code: the script's own when it failed, else 1 with an error finding, else 0.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

from allgpu.doctor.gpu_samples import GpuSample, GpuWatch, sample_evidence
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.reading import EnvironmentReading
from allgpu.doctor.verdict import THRESHOLD, Verdict, combine
from allgpu.doctor.verdict_report import render_verdict, verdict_exit_code

_ALLGPU_IMPORT = re.compile(r"^\s*(?:import allgpu|from allgpu[\s.])", re.M)
# Lint rules and the cause each supports: weight below the verdict's threshold, so a lint finding alone names
# nothing; with the run's log or GPU samples agreeing, it adds the script line as evidence.
LINT_CAUSES = {"TF002": "single-device-strategy", "TF003": "devices-hidden", "PT010": "devices-hidden",
               "PT002": "single-device-strategy", "TF008": "input-bound", "TF009": "input-bound",
               "PT005": "input-bound"}
LINT_WEIGHT = 0.5
# Environment rules (allgpu.doctor.rules) and the cause each is.
ENV_CAUSES = {"no-gpu": "no-driver", "torch-cpu-build": "cpu-build", "driver-too-old": "cuda-version-mismatch",
              "gpu-arch-unsupported": "unsupported-compute-capability", "cuda-visible-devices-hides": "devices-hidden",
              "cuda-visible-devices-hides-all": "devices-hidden", "gpu-busy": "memory-held"}


def is_allgpu_script(path: str) -> bool:
    """True when the script imports allgpu anywhere (it then runs under the step monitor, as before)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return bool(_ALLGPU_IMPORT.search(text))
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(n == "allgpu" or n.startswith("allgpu.") for n in names):
            return True
    return False


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it, from ``/proc`` (empty where there is no ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _lint_evidence(script: str, source: str) -> list[tuple[str, float, str, str]]:
    from allgpu.lint import check_source

    out = []
    for f in check_source(source, script):
        cause = LINT_CAUSES.get(f.rule_id)
        if cause:
            out.append((cause, LINT_WEIGHT, f"lint-{f.rule_id}", f"{script}:{f.line}: {f.rule_id} {f.message}"))
    return out


def _env_evidence(env: EnvironmentReading, source: str) -> list[tuple[str, float, str, str]]:
    from allgpu.doctor.frameworks import installed_packages
    from allgpu.doctor.rules import diagnose

    uses_torch = bool(re.search(r"^\s*(import|from)\s+torch\b", source, re.M))
    uses_tf = bool(re.search(r"^\s*(import|from)\s+(tensorflow|keras)\b", source, re.M))
    out = []
    for p in diagnose(env):
        cause = ENV_CAUSES.get(p.id)
        if cause is None or (p.id == "torch-cpu-build" and not uses_torch):
            continue
        weight = 1.0 if p.severity == "error" or p.id == "no-gpu" else 0.6
        out.append((cause, weight, f"env-{p.id}", f"environment ({p.id}): {p.cause}"))
    packages = installed_packages()
    uses_jax = bool(re.search(r"^\s*(import|from)\s+jax\b", source, re.M))
    if uses_jax and "jax" in packages and env.gpus and not any(p.startswith("jax-cuda") for p in packages):
        out.append(("cpu-build", 1.0, "package", "jax is installed without a jax-cuda plugin and the script imports "
                    "JAX"))
    if uses_tf and "tensorflow-cpu" in packages:
        # With GPUs present this is why TensorFlow ignores them; without, it would be the next obstacle.
        out.append(("cpu-build", 1.0 if env.gpus else THRESHOLD, "package",
                    f"package tensorflow-cpu=={packages['tensorflow-cpu']} is installed (no CUDA) and the script "
                    "imports TensorFlow"))
    return out


def _framework_evidence(env: EnvironmentReading, source: str, log_registered: int | None,
                        reader: Callable | None) -> list[tuple[str, float, str, str]]:
    """When a TensorFlow/JAX/Keras script registered fewer GPUs than the machine has (or the log does not say),
    read the frameworks (a child process, seconds) and add what their rules find."""
    if reader is None or not env.gpus or not re.search(r"^\s*(import|from)\s+(tensorflow|keras|jax)\b", source,
                                                       re.M):
        return []
    if log_registered is not None and log_registered >= len(env.gpus):
        return []
    from allgpu.doctor.framework_rules import diagnose_frameworks

    return [(p.id, 1.0 if p.severity == "error" else 0.5, f"framework-{p.id}",
             f"framework reading: {p.cause} ({'; '.join(p.evidence[:2])})") for p in diagnose_frameworks(reader(), env)]


def _stream(proc: subprocess.Popen, echo: TextIO, kept: list[str]) -> None:
    for line in proc.stdout:
        kept.append(line)
        echo.write(line)
        echo.flush()


def run_child(argv: list[str], echo: TextIO, timeout: float | None, job: list[int]) -> tuple[int, list[str], str]:
    """Run ``argv`` with stdout and stderr merged, echoing and keeping every line. Returns (exit code, lines, why
    it was stopped: ``""``, ``"timeout"`` or ``"interrupt"`` for Ctrl-C, which the child receives too; a child
    still running then is stopped as at the timeout, and the output so far is diagnosed). A child ended by a
    signal has the shell's code, 128 + the signal's number. ``job`` receives the child's pid once started."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            env=env)
    job.append(proc.pid)
    kept: list[str] = []
    reader = threading.Thread(target=_stream, args=(proc, echo, kept), daemon=True)
    reader.start()
    stopped = ""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stopped = "timeout"
    except KeyboardInterrupt:
        stopped = "interrupt"
    if stopped:
        _stop(proc, interrupted=stopped == "interrupt")
    reader.join(timeout=10)
    code = proc.returncode
    return (128 - code if code < 0 else code), kept, stopped


def _stop(proc: subprocess.Popen, interrupted: bool) -> None:
    """End ``proc``: after Ctrl-C, 2 s for its own SIGINT to end it; then SIGTERM, SIGKILL 10 s later (or at once
    on another Ctrl-C)."""
    try:
        if interrupted:
            proc.wait(timeout=2)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        if proc.poll() is None:
            proc.terminate()
            _kill_after(proc, 10)
    except KeyboardInterrupt:
        _kill_after(proc, 0)


def _kill_after(proc: subprocess.Popen, seconds: float) -> None:
    try:
        proc.wait(timeout=seconds) if seconds else None
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def diagnose_run(script: str, args: list[str], *, echo: TextIO, timeout: float | None = None,
                 sampler: Callable[[], list[GpuSample]] | None | str = "nvml",
                 env: EnvironmentReading | None = None, interval_s: float = 0.5,
                 frameworks_reader: Callable | None | str = "child") -> tuple[Verdict, int, list[str]]:
    """Run the script and return (verdict, its exit code, its output lines). ``sampler`` (``"nvml"``: the NVML one;
    None: no samples), ``env`` (default :func:`~allgpu.doctor.probe.read_environment`) and ``frameworks_reader``
    (``"child"``: :func:`~allgpu.doctor.frameworks.read_frameworks`; None: none) are the edges tests fake."""
    from allgpu.doctor.probe import nvml_gpu_sampler, read_environment

    source = Path(script).read_text(errors="replace")
    env = env if env is not None else read_environment()
    sampler = nvml_gpu_sampler() if sampler == "nvml" else sampler
    job: list[int] = []
    watch = GpuWatch(sampler, lambda: descendants(job[0]) if job else set(), interval_s).start() if sampler else None
    started = time.monotonic()
    code, lines, stopped = run_child([sys.executable, script, *args], echo, timeout, job)
    uses = watch.stop() if watch else []
    used, extra, notes = sample_evidence(uses)
    log = read_log("".join(lines))
    if frameworks_reader == "child":
        from allgpu.doctor.frameworks import read_frameworks as frameworks_reader
    extra += _lint_evidence(script, source) + _env_evidence(env, source)
    extra += _framework_evidence(env, source, len(log.registered) if log.registered or log.registered_none else None,
                                 frameworks_reader)
    notes.insert(0, f"{script} ran {time.monotonic() - started:.1f} s and exited with code {code}"
                 + (f" (stopped after --timeout {timeout:g} s)" if stopped == "timeout" else "")
                 + (" (stopped by Ctrl-C: the verdict covers what ran until then)" if stopped == "interrupt" else "")
                 + f"; its output ({len(lines)} lines) is what the log line numbers refer to.")
    if watch is None:
        notes.append("No GPU samples: NVML is not available here.")
    elif watch.error:
        notes.append(f"GPU sampling stopped early: {watch.error}.")
    verdict = combine(log, present=len(env.gpus), used=used, extra=extra, notes=notes)
    return verdict, code, lines


def run_any(script: str, args: list[str], *, json_out: bool = False, timeout: float | None = None,
            report_dir: str | None = None) -> int:
    """The ``allgpu doctor --run`` command for a script that does not use allgpu."""
    if not os.path.isfile(script):
        print(f"allgpu doctor --run: {script!r} is not a file. Fix: allgpu doctor --run path/to/train.py [args]",
              file=sys.stderr)
        return 2
    verdict, code, lines = diagnose_run(script, args, echo=sys.stderr if json_out else sys.stdout, timeout=timeout)
    if report_dir:
        out = Path(report_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "run.log").write_text("".join(lines))
        (out / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=2))
    if json_out:
        print(json.dumps({"script": script, "script_exit_code": code, **verdict.to_dict(),
                          "exit_code": code or verdict_exit_code(verdict)}, indent=2))
    else:
        print()
        render_verdict(verdict, f"allgpu doctor --run {script}")
    return code or verdict_exit_code(verdict)
