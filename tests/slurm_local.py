"""A single-node Slurm on localhost for the engine tier: munged, slurmctld and slurmd, config in a temp directory.

Debian's ``slurm-wlm`` and ``munge`` (``make engine-deps`` installs them). Everything the daemons write (state,
spool, logs, the munge socket and key) stays in the directory; :meth:`LocalSlurm.stop` ends the daemons this
object started, by their process ids. Clients (``srun``, ``sbatch``, ``squeue``, ``scancel``) find the cluster
through ``SLURM_CONF``, which :attr:`LocalSlurm.env` carries.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel")


def missing_programs() -> list[str]:
    """The programs of Debian's slurm-wlm and munge that are not installed (empty when all are)."""
    return [p for p in DAEMONS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


CONF = """\
ClusterName=allgpu-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket{auth_extra}
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=5
MinJobAge=2
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


class LocalSlurm:
    """Start with :meth:`start`, end with :meth:`stop`; :attr:`env` is the clients' environment."""

    def __init__(self, directory: Path, cred_expire: int | None = None):
        """``cred_expire``: seconds a step's credential lives, and a requeued job waits before it starts again
        (Slurm's default 120 s; ``slurm.conf``'s ``AuthInfo``)."""
        self.dir = Path(directory)
        self.auth_extra = f",cred_expire={cred_expire}" if cred_expire else ""
        self.host = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / f"{name}.out", "w")
        self.procs.append(subprocess.Popen([_program(name), *args], stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))

    def start(self, timeout: float = 60.0) -> "LocalSlurm":
        for sub in ("state", "spool", "munge"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.dir / "munge").chmod(0o700)
        (self.dir / "slurm.conf").write_text(CONF.format(host=self.host, dir=self.dir, ctld_port=_free_port(),
                                                         d_port=_free_port(), auth_extra=self.auth_extra))
        self._spawn("munged", "--foreground", "--force", f"--socket={self.dir}/munge.socket",
                    f"--key-file={key}", f"--pid-file={self.dir}/munge/munged.pid",
                    f"--seed-file={self.dir}/munge/munged.seed", f"--log-file={self.dir}/munge/munged.log")
        self._wait(lambda: (self.dir / "munge.socket").exists(), timeout, "munged's socket")
        self._spawn("slurmctld", "-D", "-c", "-i")
        time.sleep(1.0)
        self._spawn("slurmd", "-D")
        self._wait(lambda: self.run("sinfo", "-h", "-o", "%t").stdout.strip() == "idle", timeout, "an idle node")
        return self

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"no {what} after {timeout:.0f} s:\n{self.logs()}")

    def logs(self) -> str:
        parts = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out", "slurmctld.log", "slurmd.log"):
            path = self.dir / name
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text()[-2000:]}")
        return "\n".join(parts)

    def run(self, *cmd: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """Run a Slurm client (``sinfo``, ``sbatch``, ...) against this cluster."""
        env = {**self.env, **kwargs.pop("env", {})}
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env, **kwargs)

    def wait_job_gone(self, job_id: str, timeout: float = 120) -> None:
        """Wait until ``squeue`` no longer lists the job."""
        self._wait(lambda: job_id not in self.run("squeue", "-h", "-o", "%i").stdout.split(), timeout,
                   f"end of job {job_id}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self.procs.clear()
