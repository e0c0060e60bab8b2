"""SkyPilot: the ``run:`` commands of a ``num_nodes: N`` task run once per node; each node is one worker.

What SkyPilot sets (its "Environment Variables" page): ``SKYPILOT_NODE_RANK`` (0 on the head node),
``SKYPILOT_NODE_IPS`` (one IP a line, the head's first), ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NUM_GPUS_PER_NODE``.
A node running ``python train.py`` starts one replica per local GPU and meets the others at the head node's IP
on port 29500 (torchrun's default; ``MASTER_PORT`` overrides it).
"""

from __future__ import annotations

import os
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.engines.description import Cluster

VARIABLES = ("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES")
DEFAULT_PORT = 29500


def detect(env: Mapping[str, str] | None = None) -> Cluster | None:
    """This node's place in a SkyPilot task; None outside one (no ``SKYPILOT_NODE_RANK``).

    Raises:
        ClusterConfigError: a variable missing or malformed, or a node count that disagrees with the IP list.
    """
    env = os.environ if env is None else env
    if "SKYPILOT_NODE_RANK" not in env:
        return None
    missing = [k for k in VARIABLES if not env.get(k, "").strip()]
    if missing:
        raise ClusterConfigError(f"SKYPILOT_NODE_RANK is set but {', '.join(missing)} is not. Fix: run the script "
                                 "from the task's run: section, where SkyPilot sets them all.")
    ips = tuple(line.strip() for line in env["SKYPILOT_NODE_IPS"].splitlines() if line.strip())
    try:
        rank, nodes = int(env["SKYPILOT_NODE_RANK"]), int(env["SKYPILOT_NUM_NODES"])
        port = int(env.get("MASTER_PORT") or DEFAULT_PORT)
    except ValueError:
        raise ClusterConfigError("SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES and MASTER_PORT must be integers "
                                 f"(got {env['SKYPILOT_NODE_RANK']!r}, {env['SKYPILOT_NUM_NODES']!r}, "
                                 f"{env.get('MASTER_PORT')!r}).") from None
    if nodes != len(ips):
        raise ClusterConfigError(f"SKYPILOT_NUM_NODES={nodes} but SKYPILOT_NODE_IPS lists {len(ips)} addresses "
                                 f"{list(ips)}. Fix: run the script from the task's run: section.")
    task = env.get("SKYPILOT_TASK_ID")
    return Cluster("SkyPilot", VARIABLES, nodes, rank, ips[0], port, hosts=ips,
                   job=f"SkyPilot task {task}" if task else None)
