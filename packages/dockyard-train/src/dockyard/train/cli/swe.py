"""`dockyard swe validate DATASET`: every instance's gold patch must resolve, the empty one not.

``DATASET`` is ``shipped`` (the tasks in dockyard-envs) or a ``.jsonl`` / ``.json`` /
``.parquet`` file of SWE-bench / SWE-bench Pro records (or dockyard manifests). Both patches of
each instance run in parallel against a sandbox service — ``--sandbox-url`` (with
``--sandbox-token``), or one started here for the run. Writes a JSON report (``--out``), prints
a table per repository and lists the instances that are not valid with the reason
(:mod:`dockyard.envs.swe.validate`). Each (repo, version) environment is provisioned once from
its spec's install steps (``--allow-network``: pip may reach the package index), by the
sandbox's prefix builder or, with ``--builder layers``, as an image the tests then run on
(:mod:`dockyard.envs.swe.provision`); an instance whose environment cannot be built is
``provision_failed`` with its log, never scored. Exit status: 0 when every instance is valid, 1 when some
are not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from pathlib import Path

from tqdm import tqdm

from dockyard.envs.swe.data import load_shipped_tasks, load_swebench_jsonl
from dockyard.envs.swe.validate import report, table, validate
from dockyard.sandbox.client import AsyncSandboxClient
from dockyard.sandbox.launch import start_service
from dockyard.train.cli.sandbox_args import add_network_arguments, service_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="swe_command", metavar="SUBCOMMAND", required=True)
    p = sub.add_parser("validate", help="run gold and empty patches of every instance")
    p.add_argument("dataset", metavar="DATASET", help="'shipped', or a .jsonl/.json/.parquet file")
    p.add_argument("--out", default="swe_validation.json", help="the JSON report to write")
    p.add_argument("--spec", action="append", default=[], help="an environment spec file (repeat)")
    p.add_argument(
        "--sandbox-url", default=None, help="a running sandbox service (else one is started)"
    )
    p.add_argument("--sandbox-token", default=None, help="its bearer token")
    p.add_argument("--concurrency", type=int, default=4, help="sandbox tasks at once")
    p.add_argument("--timeout-s", type=float, default=120.0, help="per test run")
    p.add_argument("--limit", type=int, default=None, help="only the first N instances")
    p.add_argument(
        "--builder", choices=("prefix", "layers"), default="prefix",
        help="prefix: the sandbox's prefix environments, tests on its Python; layers (as in "
        "`harbor validate`): each (repo, version) built as an image the way SWE-bench's Docker images are (a Debian root "
        "with the spec's Python, its steps as layers), tests on the image's Python (needs "
        "--allow-network: the build reaches the package registries through the service's proxy)",
    )  # fmt: skip
    add_network_arguments(
        p,
        "let provisioning steps (pip install) reach the package index (the started service "
        "runs with --allow-network; a --sandbox-url service must have it)",
    )


def _tasks(dataset: str) -> list[dict]:
    if dataset == "shipped":
        return load_shipped_tasks()
    if not Path(dataset).is_file():
        raise FileNotFoundError(
            f"{dataset}: no such file (give 'shipped' or a .jsonl/.parquet file)"
        )
    return load_swebench_jsonl(dataset)


def local_repositories(tasks: list[dict]) -> list[str]:
    """The local clones / directories the records name (``repo_git`` without a URL scheme,
    ``repo_path``): what the service started here may read (its ``--repo-root``s)."""
    paths = {
        str(Path(p).resolve())
        for t in tasks
        for p in (t.get("repo_git"), t.get("repo_path"))
        if isinstance(p, str) and p and "://" not in p and Path(p).is_dir()
    }
    return sorted(paths)


def run(args: argparse.Namespace) -> int:
    try:
        tasks = _tasks(args.dataset)[: args.limit]
        for f in args.spec:
            if not Path(f).is_file():
                raise FileNotFoundError(f"--spec {f}: no such file")
        if args.builder == "layers" and not args.allow_network and args.sandbox_url is None:
            raise ValueError(
                "--builder layers builds each environment from the package registries: add "
                "--allow-network (and --registry HOST for a mirror with a private address)"
            )
    except (FileNotFoundError, ValueError) as e:
        print(f"dockyard swe validate: {e}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        url, token = args.sandbox_url, args.sandbox_token
        if url is None:
            print("dockyard swe validate: starting a local sandbox service", flush=True)
            extra = service_args(args)
            for repo in local_repositories(tasks):  # the records' own clones, and only them
                print(f"dockyard swe validate: the service may read {repo}", flush=True)
                extra.append(f"--repo-root={repo}")
            svc = stack.enter_context(
                start_service(workers=max(1, args.concurrency), extra_args=extra)
            )
            url, token = svc.url, svc.token
        bar = tqdm(total=len(tasks), desc="validate", file=sys.stdout, dynamic_ncols=True)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # swebench's import turns it on

        def done(row: dict) -> None:
            bar.update(1)

        async def main() -> list[dict]:
            client = AsyncSandboxClient(url, token)
            try:
                return await validate(client, tasks, args.spec, args.concurrency, args.timeout_s,
                                      on_row=done, network=args.allow_network,
                                      builder=args.builder)  # fmt: skip
            finally:
                await client.aclose()

        rows = asyncio.run(main())
        bar.close()
    rep = report(rows)
    Path(args.out).write_text(json.dumps(rep, indent=1) + "\n")
    print(table(rep))
    print(f"dockyard swe validate: {rep['valid']}/{rep['instances']} valid; report: {args.out}")
    return 0 if rep["valid"] == rep["instances"] else 1
