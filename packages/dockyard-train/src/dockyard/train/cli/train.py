"""`dockyard train --config FILE [overrides...]`: GRPO from a config (thin: check, then run).

Before anything starts the config passes the pre-flight (:mod:`dockyard.train.preflight`): the
schema, the registered names, and every check of this machine but loading the model with
transformers (well under a second; joining a cluster, ``cluster.address``, only those about the
driver's own machine: data files, output folders); any problem prints a list and exits 2.
``--dry-run`` runs all of it, the model and tokenizer loads included, then stops: nothing is
started.
"""

from __future__ import annotations

import argparse

from dockyard.train.preflight import ON_THE_WORKERS, check_or_exit, load_or_exit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config (see examples/configs/)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run every pre-flight check (the model and tokenizer load too), start nothing",
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides: grpo.max_num_steps=10")


def run(args: argparse.Namespace) -> int:
    cfg = load_or_exit(args.config, args.overrides, "train")
    # joining a cluster, this machine is only the driver's: the workers' checks run on --dry-run
    skip = ON_THE_WORKERS if cfg.cluster.address and not args.dry_run else ()
    check_or_exit(cfg, args.config, "train", deep=True, load=args.dry_run, skip=skip)
    if args.dry_run:
        print(f"dockyard train: OK: {args.config} passes every check; nothing started", flush=True)
        return 0
    # lazy: the driver imports Ray (heavy, ~1 s), which --dry-run must not import
    from dockyard.train.algorithms.grpo import train

    result = train(cfg, resume=args.resume, progress=not args.no_progress)
    if result.val_end is not None:
        before = "n/a" if result.val_start is None else f"{100 * result.val_start:.1f}%"
        print(f"held-out pass rate: {before} -> {100 * result.val_end:.1f}%", flush=True)
    print(f"logs: {result.log_dir}  plot: {result.plot}", flush=True)
    return 0
