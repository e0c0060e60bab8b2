"""Start-up: everything that turns "a script and some devices" into "this process is replica r of N on device d".

Rooms, each one concept:

- :mod:`~allgpu.runtime.env`: the environment contract between launchers and replicas (the only code that
  reads or writes ``ALLGPU_*``);
- :mod:`~allgpu.runtime.cluster`: who is in the job, from torchrun's variables or a ``TF_CONFIG``;
- :mod:`~allgpu.runtime.replicas`: launch-free start, re-executing the script once per extra device;
- :mod:`~allgpu.runtime.launch`: ``allgpu.launch(fn)``, one process per replica for a function;
- :mod:`~allgpu.runtime.elastic` and :mod:`~allgpu.runtime.replica_main`: ``allgpu run`` on PyTorch's elastic
  launcher; :mod:`~allgpu.runtime.agent_stop`: the agent's stop reaches a frozen replica, and is described;
- :mod:`~allgpu.runtime.interrupt` and :mod:`~allgpu.runtime.waiting`: Ctrl-C seen while blocked, and named
  with the newest checkpoint; whom a rendezvous waits for;
- :mod:`~allgpu.runtime.process_group`: the ``torch.distributed`` process group of a placed replica;
- :mod:`~allgpu.runtime.placement`: the frozen :class:`Placement` every strategy constructor receives.

This layer imports only ``allgpu.errors``, ``allgpu.devices`` and PyTorch; the core and the strategies build on it.
Nothing is imported here eagerly, so ``allgpu.launch`` stays importable without torch.
"""
