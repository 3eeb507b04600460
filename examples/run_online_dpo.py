"""Online DPO with an LLM judge:
``python examples/run_online_dpo.py --config examples/configs/online_dpo.yaml [--output DIR]``.

The same as ``dockyard online-dpo``.
"""

from __future__ import annotations

import argparse
import sys

from dockyard.train.cli import online_dpo as online_dpo_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    online_dpo_cli.add_arguments(parser)
    sys.exit(online_dpo_cli.run(parser.parse_args()))
