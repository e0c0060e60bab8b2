"""The core: what every strategy is built from. Gradient buckets and collectives (``sync``, ``replica_group``,
``ledger``), what ``scope()`` mirrors (``mirror``), datasets split per replica (``data``, ``data_rng``),
accumulation, compiled backward, the optimizer stepped in backward, loss scaling, ``ReduceOp`` and the torch side
of "will it fit" (``memory_fit``)."""
