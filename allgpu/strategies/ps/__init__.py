"""ParameterServerStrategy's server side (``server.py``): variable shards served over ``torch.distributed.rpc``."""
