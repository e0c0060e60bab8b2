"""FullyShardedStrategy's collaborators: the sharding plan, accumulation and collective counting, compiling each unit, meta-device initialisation."""
