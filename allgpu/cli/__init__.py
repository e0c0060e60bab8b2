"""The ``allgpu`` command line: one module per command, each with ``add_parser`` and ``run``."""
