"""Rebuild the shipped SWE task manifests.

    python -m dockyard.envs.swe.builder \\
        --package inflection==0.5.1 --package parse==1.20.2 --per-package 20 --seed 0 \\
        --out packages/dockyard-envs/src/dockyard/envs/swe/tasks/pypi_mutations.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dockyard.envs.swe.builder.build import build_package_tasks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dockyard.envs.swe.builder", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--package", action="append", required=True, help="NAME==VERSION (repeatable)")
    ap.add_argument("--per-package", type=int, default=20, help="tasks to keep per package")
    ap.add_argument("--max-attempts", type=int, default=150, help="mutations to try per package")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    args = ap.parse_args(argv)
    records = []
    for spec in args.package:
        if "==" not in spec:
            ap.error(f"--package {spec!r}: expected NAME==VERSION")
        name, version = spec.split("==", 1)
        records += build_package_tasks(
            name, version, max_tasks=args.per_package, max_attempts=args.max_attempts, seed=args.seed,
            log=lambda s: print(s, file=sys.stderr, flush=True),
        )  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    print(f"wrote {len(records)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
