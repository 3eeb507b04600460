"""What the AI-feedback commands share (`dockyard online-dpo`, `dockyard rlaif`): the arguments,
the checks (a preference loss, as the DPO driver's; the judge; no environment or sandbox), the
output folder and the closing line with the judge's held-out win rate. Each command is a
:class:`FeedbackCommand`: its names, its own checks, how it trains, how its summary reads.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockyard.core.config.errors import ConfigError
from dockyard.train.preflight import deep_check, load_or_exit, report


@dataclass(frozen=True)
class FeedbackCommand:
    """``name`` (``online-dpo``), its example config, an override shown in ``--help``, its own
    ``problems(cfg)``, ``train(cfg, out, progress) -> (result, log folder)`` (fleets and judge
    started and stopped there) and ``summary(cfg, result)``, the closing line's start."""

    name: str
    example: str
    override: str
    problems: Callable[[Any], list[str]]
    train: Callable[[Any, str, bool], tuple[Any, str]]
    summary: Callable[[Any, Any], str]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--config", required=True,
                            help=f"YAML config (examples/configs/{self.example})")  # fmt: skip
        parser.add_argument("--output", default=None, help="folder for the trained HF model")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        parser.add_argument("overrides", nargs="*", help=f"dotted overrides: {self.override}")

    def run(self, args: argparse.Namespace) -> int:
        cfg = load_or_exit(args.config, args.overrides, self.name, driver="dpo")
        # the loss must be a preference loss (the DPO driver's); no environment or sandbox
        problems = deep_check(cfg, load=False, skip=("sandbox",), driver="dpo")
        if problems := problems + self.problems(cfg):
            report(self.name, ConfigError(problems, args.config))
        out = args.output or cfg.checkpointing.export_hf or str(Path(cfg.logger.log_dir) / "model")
        result, log_dir = self.train(cfg, out, not args.no_progress)
        val = result.val
        rate = (
            " -> ".join(
                f"{val[s]['val/win_rate']:.3f} (step {s})" for s in sorted({min(val), max(val)})
            )
            if val
            else "not measured"
        )
        print(f"{self.summary(cfg, result)}; judge win rate over the starting policy {rate}; "
              f"model in {out}; logs in {log_dir}", flush=True)  # fmt: skip
        return 0
