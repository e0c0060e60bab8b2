"""``python -m allgpu.doctor [--json] [--reading FILE]``: the same as ``allgpu doctor``."""

import argparse
import sys

from allgpu.cli.doctor import configure, run

if __name__ == "__main__":
    parser = configure(argparse.ArgumentParser(prog="python -m allgpu.doctor"))
    sys.exit(run(parser.parse_args()))
