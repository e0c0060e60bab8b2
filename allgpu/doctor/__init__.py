"""``allgpu doctor``: why a GPU on this machine would sit idle, read from the environment before training.

* :func:`read_environment` reads the machine (NVML, ``torch.cuda``, environment, ``/proc``) into an
  :class:`EnvironmentReading`, plain frozen data that round-trips through JSON;
* :func:`diagnose` runs the pure rules on a reading and returns :class:`~allgpu.findings.Finding` s (id, severity,
  cause = ``message``, fix, devices); :class:`Problem` is the doctor's constructor spelling for one;
* :func:`idle_devices` is the rule for a visible GPU with no replica, for the step monitor and strategies;
* :func:`read_frameworks` reads TensorFlow, JAX and Keras in a child process into a :class:`FrameworksReading`,
  judged by :func:`diagnose_frameworks`;
* :func:`read_log` reads a run's log and :func:`verdict_from_log` turns it into a :class:`Verdict`: devices
  present / registered / used and findings whose ids are the documented :data:`CAUSE_IDS`
  (:mod:`allgpu.doctor.causes`).

Exit code of ``allgpu doctor``: 1 when a problem has severity ``"error"``, else 0 (:func:`allgpu.findings.exit_code`).
"""

from allgpu.doctor.causes import CAUSE_IDS
from allgpu.doctor.framework_rules import diagnose_frameworks
from allgpu.doctor.frameworks import FrameworksReading, read_frameworks
from allgpu.doctor.idle import idle_devices
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.probe import read_environment
from allgpu.doctor.problem import Problem, exit_code
from allgpu.doctor.reading import EnvironmentReading, ReadingFormatError
from allgpu.doctor.rules import diagnose
from allgpu.findings import Finding
from allgpu.doctor.verdict import Verdict, verdict_from_log

__all__ = [
    "CAUSE_IDS",
    "EnvironmentReading",
    "Finding",
    "FrameworksReading",
    "Problem",
    "ReadingFormatError",
    "Verdict",
    "diagnose",
    "diagnose_frameworks",
    "exit_code",
    "idle_devices",
    "read_environment",
    "read_frameworks",
    "read_log",
    "verdict_from_log",
]
