"""allgpu: every device you have works on your training; when one sits idle, allgpu tells you why."""

__version__ = "0.1.0"
