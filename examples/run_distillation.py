"""On-policy distillation from a frozen teacher:
``python examples/run_distillation.py --config examples/configs/distillation.yaml loss_fn.topk=8``.

The same as ``dockyard distill``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import distill as distill_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    distill_cli.add_arguments(parser)
    sys.exit(distill_cli.run(parser.parse_args()))
