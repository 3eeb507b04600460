"""The network arguments of the commands that start a local sandbox service to validate tasks
(`dockyard swe validate`, `dockyard harbor validate`), and what they pass on to it."""

from __future__ import annotations

import argparse


def add_network_arguments(p: argparse.ArgumentParser, allow_help: str) -> None:
    """``--allow-network`` (``allow_help`` says what it lets through) and ``--registry HOST``."""
    p.add_argument("--allow-network", action="store_true", help=allow_help)
    p.add_argument(
        "--registry", action="append", default=[], metavar="HOST",
        help="a package registry the started service's provisioning may reach, passed on as its "
        "--registry (repeatable): needed where a registry's name resolves to a private or "
        "special-purpose address (an internal mirror)",
    )  # fmt: skip


def service_args(args: argparse.Namespace) -> list[str]:
    """The started service's own flags for those arguments."""
    return [*(["--allow-network"] if args.allow_network else []),
            *(f"--registry={host}" for host in args.registry)]  # fmt: skip
