"""`dockyard view RUN_DIR [RUN_DIR ...]`: serve the viewer of runs' metrics and rollout logs on
127.0.0.1 (:mod:`dockyard.train.view`); it reads the folders only."""

from __future__ import annotations

import argparse

from dockyard.train.view.data import find_runs
from dockyard.train.view.server import check_host, serve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs",
        nargs="+",
        help="run log folders (logger.log_dir), or folders above them (results/quickstart)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback only)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host beyond loopback (anyone reaching it reads the runs)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        check_host(args.host, args.allow_remote)
        runs = find_runs(args.run_dirs)
    except ValueError as e:
        print(f"dockyard view: {e}")
        return 2
    names = ", ".join(r.name for r in runs)
    print(
        f"dockyard view: {len(runs)} run(s) ({names}) at http://{args.host}:{args.port}/",
        flush=True,
    )
    serve(args.run_dirs, args.host, args.port, args.allow_remote)
    return 0
