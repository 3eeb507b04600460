"""A reward model on preference pairs:
``python examples/run_rm.py --config examples/configs/rm.yaml [--output DIR] [overrides]``.

The same as ``dockyard rm``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import rm as rm_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    rm_cli.add_arguments(parser)
    sys.exit(rm_cli.run(parser.parse_args()))
