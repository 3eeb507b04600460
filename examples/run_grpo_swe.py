"""GRPO on SWE-style tasks, for users of the original ``run_grpo_swe.py``.

    python examples/run_grpo_swe.py                       # examples/configs/grpo_swe.yaml
    python examples/run_grpo_swe.py --config my_swe.yaml grpo.max_num_steps=100

Equivalent to ``dockyard train --config examples/configs/grpo_swe.yaml``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dockyard.train.cli import train as train_cli

DEFAULT = Path(__file__).parent / "configs" / "grpo_swe.yaml"

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    train_cli.add_arguments(parser)
    argv = sys.argv[1:]
    if "--config" not in argv:
        argv = ["--config", str(DEFAULT), *argv]
    sys.exit(train_cli.run(parser.parse_args(argv)))
