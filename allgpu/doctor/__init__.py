"""``allgpu doctor``: why a GPU on this machine would sit idle, read from the environment before training.

* :func:`read_environment` reads the machine (NVML, ``torch.cuda``, environment, ``/proc``) into an
  :class:`EnvironmentReading`, plain frozen data that round-trips through JSON;
* :func:`diagnose` runs the pure rules on a reading and returns :class:`~allgpu.findings.Finding` s (id, severity,
  cause = ``message``, fix, devices); :class:`Problem` is the doctor's constructor spelling for one;
* :func:`idle_devices` is the rule for a visible GPU with no replica, for the step monitor and strategies.

Exit code of ``allgpu doctor``: 1 when a problem has severity ``"error"``, else 0 (:func:`allgpu.findings.exit_code`).
"""

from allgpu.doctor.idle import idle_devices
from allgpu.doctor.probe import read_environment
from allgpu.doctor.problem import Problem, exit_code
from allgpu.doctor.reading import EnvironmentReading, ReadingFormatError
from allgpu.doctor.rules import diagnose
from allgpu.findings import Finding

__all__ = [
    "EnvironmentReading",
    "Finding",
    "Problem",
    "ReadingFormatError",
    "diagnose",
    "exit_code",
    "idle_devices",
    "read_environment",
]
