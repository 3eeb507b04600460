"""Launch GRPO from a config: ``python examples/run_grpo.py --config examples/configs/grpo_math.yaml``.

The same as ``dockyard train``: pass ``--config FILE`` and dotted overrides
(``grpo.max_num_steps=10``), ``--resume`` to continue from the latest checkpoint.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import train as train_cli

if __name__ == "__main__":  # vLLM spawns processes: keep the guard
    parser = argparse.ArgumentParser(description=__doc__)
    train_cli.add_arguments(parser)
    sys.exit(train_cli.run(parser.parse_args()))
