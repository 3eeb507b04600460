"""How many of SWE-bench Pro's published Dockerfile pairs read into the layered builder's steps.

    uv run --no-sync python bench/swe_pro_dockerfiles.py /path/to/SWE-bench_Pro-os [--why]

Reads ``dockerfiles/base_dockerfile/<instance>/Dockerfile`` and
``dockerfiles/instance_dockerfile/<instance>/Dockerfile`` of a checkout of
scaleapi/SWE-bench_Pro-os (not part of this repository) through
:func:`dockyard.envs.swe.pro.pro_image` and prints, per repository, how many read and, with
``--why``, the refusals (their line dropped), counted.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.pro import pro_image
from dockyard.envs.swe.records import SweInstance

_ID = re.compile(r"instance_(?P<owner>[^_]+)__(?P<name>.+?)-[0-9a-f]{40}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="a checkout of scaleapi/SWE-bench_Pro-os")
    ap.add_argument("--why", action="store_true", help="print the refusals, counted")
    args = ap.parse_args(argv)
    root = args.checkout / "dockerfiles"
    ok: collections.Counter[str] = collections.Counter()
    n: collections.Counter[str] = collections.Counter()
    why: collections.Counter[str] = collections.Counter()
    for d in sorted((root / "base_dockerfile").iterdir()):
        m = _ID.match(d.name)
        if m is None or not (root / "instance_dockerfile" / d.name / "Dockerfile").is_file():
            continue
        repo = f"{m['owner']}/{m['name']}"
        pro = {
            "base_dockerfile": (d / "Dockerfile").read_text(),
            "instance_dockerfile": (root / "instance_dockerfile" / d.name / "Dockerfile").read_text(),
        }  # fmt: skip
        inst = SweInstance(d.name, repo, "", "", "", "", ["x"], [], flavor="swebench_pro", pro=pro)
        n[repo] += 1
        try:
            pro_image(inst)
            ok[repo] += 1
        except StepRefused as e:
            why[re.sub(r"^.*? line \d+: ", "", str(e))[:100]] += 1
    print("| repository | instances | Dockerfiles read |\n|---|---:|---:|")
    for repo in sorted(n, key=str.lower):
        print(f"| {repo} | {n[repo]} | {ok[repo]} |")
    print(f"| **all** | {sum(n.values())} | {sum(ok.values())} |")
    if args.why:
        for reason, c in why.most_common():
            print(f"{c:4}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
