"""DPO and its variants on preference pairs:
``python examples/run_dpo.py --config examples/configs/dpo.yaml [--output DIR] loss_fn.type=ipo``.

The same as ``dockyard dpo``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import dpo as dpo_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    dpo_cli.add_arguments(parser)
    sys.exit(dpo_cli.run(parser.parse_args()))
