"""``dockyard config``: ``check FILE [overrides...]`` validates a config (the schema, and the
environment and dataset names against the registry of dockyard-envs) and prints the resolved
result (exit 0) or every problem (exit 2); ``check --deep`` also runs the pre-flight checks that
look at this machine (model and tokenizer load, data files, installed extras, bubblewrap,
output folders: :mod:`dockyard.train.preflight`); ``docs`` prints the configuration reference
(docs/configuration.md)."""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from dockyard.core.config import MasterConfig
from dockyard.core.config.docs import render
from dockyard.core.config.errors import ConfigError
from dockyard.train.algorithms.drivers import loss_driver
from dockyard.train.preflight import load_and_validate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check", help="validate FILE with overrides and print the resolved config"
    )
    check.add_argument("file", help="YAML config file")
    check.add_argument(
        "overrides",
        nargs="*",
        help="dotted overrides: grpo.num_prompts_per_step=32, ~key.to.delete",
    )
    check.add_argument("--format", choices=("yaml", "json"), default="yaml", help="output format")
    check.add_argument(
        "--deep",
        action="store_true",
        help="also check this machine: model and tokenizer load (offline: from a local path or "
        "the HF cache), data files exist, the extras the config turns on are installed, "
        "bubblewrap for started sandboxes, output folders creatable (seconds)",
    )
    sub.add_parser("docs", help="print the configuration reference (Markdown)")


def run(args: argparse.Namespace) -> int:
    if args.action == "docs":
        sys.stdout.write(render())
        return 0
    try:
        cfg = load_and_validate(args.file, args.overrides, deep=args.deep)
    except ConfigError as e:  # the same list `dockyard train` prints
        print(f"dockyard config check: {e}", file=sys.stderr)
        return 2
    data = cfg.model_dump(mode="json")
    if args.format == "json":
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    what = "valid, and passes the pre-flight checks on this machine" if args.deep else "valid"
    print(f"# OK: {args.file} is {what}{_driver(cfg)}", file=sys.stderr)
    return 0


def _driver(cfg: MasterConfig) -> str:
    """``; ... runs with `dockyard dpo```: the command whose driver trains the config's loss."""
    command = loss_driver(cfg.loss_fn.type)
    return f"; loss_fn.type {cfg.loss_fn.type} runs with `dockyard {command}`" if command else ""
