"""Supervised fine-tuning (masked NLL on chat JSONL):
``python examples/run_sft.py --config my_sft.yaml --output results/sft_model data.train_path=chat.jsonl``.

The same as ``dockyard sft``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import sft as sft_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    sft_cli.add_arguments(parser)
    sys.exit(sft_cli.run(parser.parse_args()))
