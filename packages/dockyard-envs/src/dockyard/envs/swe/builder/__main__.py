"""Build SWE task manifests from PyPI sdists by mutation.

    python -m dockyard.envs.swe.builder \\
        --package inflection==0.5.1 --package parse==1.20.2 --per-package 25 --seed 0 \\
        --out my_tasks.jsonl

The shipped set (its libraries and settings), validated and published with its report, is
rebuilt by ``scripts/build_swe_tasks.sh``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dockyard.envs.swe.builder.build import build_package_tasks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dockyard.envs.swe.builder", description=(__doc__ or "").split("\n")[0]
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
        # written after every package: a failure later keeps what was built
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    print(f"wrote {len(records)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
