"""RLAIF / constitutional AI with an LLM judge:
``python examples/run_rlaif.py --config examples/configs/rlaif.yaml [--output DIR]``.

The same as ``dockyard rlaif``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import rlaif as rlaif_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    rlaif_cli.add_arguments(parser)
    sys.exit(rlaif_cli.run(parser.parse_args()))
