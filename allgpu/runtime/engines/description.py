"""The one frozen description every cluster engine's discovery returns (:class:`Cluster`).

Two shapes of job exist, and :class:`Cluster` holds either:

- the engine started **one process per replica** (Slurm's ``srun`` tasks, a launcher's replicas, Ray Train's
  workers, one-process Kubeflow PyTorchJob pods): :attr:`Cluster.process` is this replica's
  :class:`~allgpu.runtime.cluster.ClusterSpec`, and the strategy joins it;
- the engine started **one process per node** (``TF_CONFIG`` workers, SkyPilot nodes, Kubeflow Trainer / JobSet
  pods without torchrun): :attr:`Cluster.process` is None and the node's process starts one replica per local
  device (launch-free), placed by :meth:`Cluster.first_replica`.
"""

from __future__ import annotations

from dataclasses import dataclass

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import ClusterSpec


@dataclass(frozen=True)
class Cluster:
    """Who is in the job, as one cluster engine describes it.

    Attributes:
        engine: the engine in words: ``"torchrun"``, ``"Ray Train"``, ``"Slurm"``, ``"PyTorchJob"``,
            ``"Kubeflow Trainer"``, ``"SkyPilot"``, ``"TF_CONFIG"``.
        variables: the environment variables it was read from (for messages).
        units: how many processes the engine started for the job (tasks, pods, nodes, workers).
        index: this process's index among them (``0 <= index < units``).
        master_addr / master_port: the rendezvous address (node 0's host, a port every process agrees on).
        process: this replica's place when the engine started one process per replica, else None.
        hosts: the nodes' host names or addresses, node 0 first, when the engine lists them.
        job: the job in words where the engine names it (``"SkyPilot task sky-2026..."``), checked at the
            rendezvous (:mod:`allgpu.runtime.job_identity`); None: only the replica count is.
    """

    engine: str
    variables: tuple[str, ...]
    units: int
    index: int
    master_addr: str
    master_port: int
    process: ClusterSpec | None = None
    hosts: tuple[str, ...] = ()
    job: str | None = None

    def __post_init__(self):
        if self.units < 1 or not 0 <= self.index < self.units:
            raise ClusterConfigError(
                f"{self.engine} says this is process {self.index} of {self.units} ({', '.join(self.variables)}): "
                f"expected 0 <= index < {self.units}. Fix: launch through {self.engine}, which sets them.")

    @property
    def per_replica(self) -> bool:
        """True when the engine started this process as one replica (join); False: one process per node."""
        return self.process is not None

    def first_replica(self, local_replicas: int) -> ClusterSpec:
        """This node's first replica when every node runs ``local_replicas`` (one per device), as torchrun's
        static node rank does: ``rank = index * local_replicas``, ``world_size = units * local_replicas``.

        Raises:
            ClusterConfigError: for an engine that started one process per replica (join it instead).
        """
        if self.process is not None:
            raise ClusterConfigError(f"{self.engine} started one process per replica; this process is replica "
                                     f"{self.process.rank} and starts no other.")
        return ClusterSpec(self.index * local_replicas, self.units * local_replicas, 0, local_replicas,
                           self.master_addr, self.master_port, self.engine, self.job)

    def agrees_with(self, other: "Cluster") -> bool:
        """Whether two engines describe the same place: as many processes, this one at the same index."""
        return (self.units, self.index) == (other.units, other.index)
