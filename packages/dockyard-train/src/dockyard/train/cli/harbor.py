"""`dockyard harbor validate DIR` / `dockyard harbor export DIR OUT.jsonl`: Harbor task folders.

``validate`` loads every task under ``DIR`` (one task directory or a folder of them; a malformed
task stops it with the file, line and reason), then runs each task's oracle ``solution/solve.sh``
(must reach reward 1) and an empty agent (must not) in parallel against a sandbox service (the
one at ``--sandbox-url``, or one it starts here), prints a table and writes the JSON report.
Exit 0 iff every task is ok. ``export`` writes the loaded tasks as JSONL for
``data.train_path`` (the ``harbor`` environment reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

from dockyard.envs.harbor import HarborFormatError, load_tasks
from dockyard.envs.harbor.env import HarborEnvironment
from dockyard.envs.harbor.validate import report_table, validate_async
from dockyard.sandbox.launch import start_service
from dockyard.train.cli.sandbox_args import add_network_arguments, service_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = sub.add_parser("validate", help="oracle must score 1, an empty agent must not")
    v.add_argument("dir", metavar="DIR", help="a Harbor task directory or a folder of them")
    v.add_argument(
        "--sandbox-url", default=None, help="a running dockyard-sandbox (default: start one)"
    )
    v.add_argument("--concurrency", type=int, default=4, help="tasks validated at once (default 4)")
    v.add_argument(
        "--out", default="harbor_validate.json", help="JSON report (default %(default)s)"
    )
    add_network_arguments(
        v,
        "let provisioning steps (pip install) reach the network (the started service only)",
    )
    e = sub.add_parser("export", help="write the tasks as JSONL (for data.train_path)")
    e.add_argument("dir", metavar="DIR")
    e.add_argument("out", metavar="OUT")
    for p in (v, e):
        p.add_argument(
            "--builder", choices=("layers", "prefix"), default=None,
            help="layers: build each Dockerfile as Docker would (the default); prefix: the older "
            "mapping onto the sandbox's system (the default for the shipped tasks/)",
        )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    refused: list[dict[str, str]] = []
    try:
        tasks = load_tasks(args.dir, args.builder, refused)
    except HarborFormatError as err:
        print(f"dockyard harbor: {err}", file=sys.stderr)
        return 2
    for r in refused:  # refused at load time: what cannot run here, and why
        print(f"dockyard harbor: refused {r['id']}: {r['refused']}", file=sys.stderr)
    if not tasks:
        print(f"dockyard harbor: every task of {args.dir} was refused", file=sys.stderr)
        return 2
    if args.action == "export":
        with open(args.out, "w") as f:
            for t in tasks:
                f.write(json.dumps(t) + "\n")
        print(f"dockyard harbor: wrote {len(tasks)} tasks to {args.out}")
        return 0
    return _validate(args, tasks, refused)


def _validate(args: argparse.Namespace, tasks: list[dict], refused: list[dict]) -> int:
    print(f"dockyard harbor: validating {len(tasks)} tasks from {args.dir}", flush=True)
    with contextlib.ExitStack() as stack:
        url = args.sandbox_url
        if url is None:
            extra = service_args(args)
            svc = stack.enter_context(
                start_service(workers=max(2, args.concurrency), extra_args=extra)
            )
            url = svc.url
        done = [0]

        def progress(row: dict) -> None:
            done[0] += 1
            mark = "ok" if row["ok"] else "FAIL"
            print(f"  [{done[0]}/{len(tasks)}] {row['id']}: {mark}", flush=True)

        async def main() -> dict:
            env = HarborEnvironment(url, max_wait_s=600.0)
            try:
                return await validate_async(tasks, env, args.concurrency, progress)
            finally:
                await env.aclose()

        report = asyncio.run(main())
    report["refused"] = refused
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(report_table(report))
    print(f"dockyard harbor: report written to {args.out}")
    return 0 if report["ok"] == report["total"] and not refused else 1
