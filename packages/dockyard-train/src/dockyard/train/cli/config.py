"""``dockyard config``: ``check FILE [overrides...]`` validates a config (the schema, and the
environment and dataset names against the registry of dockyard-envs) and prints the resolved
result (exit 0) or every problem (exit 2); ``docs`` prints the configuration reference
(docs/configuration.md)."""

from __future__ import annotations

import argparse
import json
import sys

import yaml


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
    sub.add_parser("docs", help="print the configuration reference (Markdown)")


def run(args: argparse.Namespace) -> int:
    from dockyard.core.config.errors import ConfigError
    from dockyard.core.config.loader import load_config

    if args.action == "docs":
        from dockyard.core.config.docs import render

        sys.stdout.write(render())
        return 0
    from dockyard.train.environments import check_names

    try:
        cfg = load_config(args.file, args.overrides)
        check_names(cfg, args.file)  # env.<name>.type and data.dataset_name are registered
    except ConfigError as e:
        print(f"dockyard config check: {e}", file=sys.stderr)
        return 2
    data = cfg.model_dump(mode="json")
    if args.format == "json":
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    print(f"# OK: {args.file} is valid", file=sys.stderr)
    return 0
