"""`dockyard train --config FILE [overrides...]`: GRPO from a config (thin: parse, then run)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config (see examples/configs/)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: grpo.max_num_steps=10")


def run(args: argparse.Namespace) -> int:
    from dockyard.core.config import load_config
    from dockyard.train.algorithms.grpo import train
    from dockyard.train.environments import check_names

    cfg = load_config(args.config, args.overrides)
    check_names(cfg, args.config)  # before any process starts
    result = train(cfg, resume=args.resume, progress=not args.no_progress)
    if result.val_end is not None:
        before = "n/a" if result.val_start is None else f"{100 * result.val_start:.1f}%"
        print(f"held-out pass rate: {before} -> {100 * result.val_end:.1f}%", flush=True)
    print(f"logs: {result.log_dir}  plot: {result.plot}", flush=True)
    return 0
