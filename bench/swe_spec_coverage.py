"""How many of swebench's (repo, version) specifications translate into a build plan, per repo.

    uv run --no-sync python bench/swe_spec_coverage.py            # the table (markdown)
    uv run --no-sync python bench/swe_spec_coverage.py --why      # and the refusals, counted

Columns: ``specs`` (swebench 4.x's MAP_REPO_VERSION_TO_SPECS entries), ``before`` (what the
translation at commit 46aa4b7 accepted: the figures quoted in docs/envs/swe-agent.md before
issue 35, measured with that commit's ``environment_for``), ``plan`` (:func:`dockyard.envs.swe.
plan.plan_for` translates it: a base and ordered steps, nothing refused), ``reads repo`` (of
those, the plans whose environment reads the repository's requirements file / environment.yml /
metadata at environment_setup_commit — the build needs the instance's repository at hand).
Every translated plan also writes as the current EnvSpec over the sandbox's own system (locales
approximated by C.UTF-8, the sandbox's Python). Translating is not building: a plan's pins may
still fail to install or compile; ``dockyard swe validate`` says which, with the step's output.
The 12 repositories of the original SWE-bench are marked with ``*``.
"""

from __future__ import annotations

import argparse
import collections
import sys

from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.provision import setup_plan
from dockyard.envs.swe.specs import swebench_setup

BEFORE = {
    "redis/redis": 12, "jqlang/jq": 9, "nlohmann/json": 1, "valkey-io/valkey": 4,
    "fmtlib/fmt": 11, "javaparser/javaparser": 2, "django/django": 3, "mwaskom/seaborn": 1,
    "psf/requests": 28, "pydicom/pydicom": 11, "pylint-dev/astroid": 12, "pytest-dev/pytest": 19,
    "pyvista/pyvista": 4, "scikit-learn/scikit-learn": 7, "swe-bench/humaneval": 1,
    "sympy/sympy": 13, "sharkdp/bat": 1, "tokio-rs/tokio": 1,
}  # fmt: skip
"""Specs the translation at 46aa4b7 accepted, per repository (others: 0). Total 140 / 689."""

ORIGINAL = {
    "astropy/astropy", "django/django", "pallets/flask", "matplotlib/matplotlib",
    "pylint-dev/pylint", "pytest-dev/pytest", "psf/requests", "scikit-learn/scikit-learn",
    "mwaskom/seaborn", "sphinx-doc/sphinx", "sympy/sympy", "pydata/xarray",
}  # fmt: skip


def count() -> tuple[dict[str, collections.Counter[str]], collections.Counter[str]]:
    """Per repo: specs / plan / reads_repo counts; and the refusals' reasons, counted."""
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    rows: dict[str, collections.Counter[str]] = {}
    why: collections.Counter[str] = collections.Counter()
    for repo, versions in MAP_REPO_VERSION_TO_SPECS.items():
        c = rows.setdefault(repo, collections.Counter())
        for version in versions:
            c["specs"] += 1
            setup = swebench_setup(repo, version)
            assert setup is not None
            try:
                plan = setup_plan(setup)
            except StepRefused as e:
                why[str(e).split(": ")[-1][:110]] += 1
                continue
            c["plan"] += 1
            c["reads_repo"] += int(plan.reads_repository)
    return rows, why


def table(rows: dict[str, collections.Counter[str]]) -> str:
    lines = [
        "| repository | specs | before | plan | reads repo |",
        "|---|---:|---:|---:|---:|",
    ]
    tot: collections.Counter[str] = collections.Counter()
    orig: collections.Counter[str] = collections.Counter()
    for repo in sorted(rows, key=str.lower):
        c = rows[repo]
        before = BEFORE.get(repo, 0)
        mark = " *" if repo in ORIGINAL else ""
        lines.append(
            f"| {repo}{mark} | {c['specs']} | {before} | {c['plan']} | {c['reads_repo']} |"
        )
        for t in (tot, *([orig] if repo in ORIGINAL else [])):
            t.update({**c, "before": before})
    for name, t in (("all", tot), ("original 12 *", orig)):
        lines.append(
            f"| **{name}** | {t['specs']} | {t['before']} | {t['plan']} | {t['reads_repo']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--why", action="store_true", help="print the refusals, counted")
    args = ap.parse_args(argv)
    rows, why = count()
    print(table(rows))
    if args.why:
        print()
        for reason, n in why.most_common():
            print(f"{n:4}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
