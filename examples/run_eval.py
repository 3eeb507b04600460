"""Evaluate models on a benchmark or a held-out set:
``python examples/run_eval.py --config examples/configs/eval.yaml [--models A B] eval.num_samples=4``.

The same as ``dockyard eval``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import eval as eval_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    eval_cli.add_arguments(parser)
    sys.exit(eval_cli.run(parser.parse_args()))
