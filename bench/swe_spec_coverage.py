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

    uv run --no-sync python bench/swe_spec_coverage.py --build    # and build them (minutes)

``--build`` goes one step further for the plans that do not read the repository (those need an
instance's repository at hand): each is written as the layered builder's image
(:func:`dockyard.envs.swe.provision.layered_image`: a ``python:<release>`` Debian root, the
spec's steps as RUN layers) and built by a sandbox service started here with
``--allow-network`` (the package registries through its proxy; ``--registry HOST`` for a
mirror with a private address), then its ``python`` runs once. Plans that write the same image
are built once (the layers are content-addressed). Adds a ``built`` column, and lists each
image that failed with its step, exit code and the tail of its log.
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


def build(
    registries: list[str], cache_dir: str | None
) -> tuple[dict[str, collections.Counter[str]], list[str]]:
    """Build every distinct image of the plans that do not read the repository (module
    docstring): per repo, ``built`` counts its specs whose image built and ran ``python``; and
    one line per failed image."""
    import base64
    import hashlib
    import io
    import json
    import tarfile
    import tempfile

    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    from tqdm import tqdm

    from dockyard.envs.swe.provision import environment_for
    from dockyard.sandbox.launch import start_service
    from dockyard.sandbox.models import RepoSpec, Task

    images: dict[str, tuple[object, list[tuple[str, str]]]] = {}
    for repo, versions in MAP_REPO_VERSION_TO_SPECS.items():
        for version in versions:
            setup = swebench_setup(repo, version)
            assert setup is not None
            try:
                plan = setup_plan(setup)
            except StepRefused:
                continue
            if plan.reads_repository:
                continue
            env = environment_for(setup, timeout_s=3600, builder="layers").spec
            assert env is not None
            assert env.image is not None
            stages = json.dumps(env.image.model_dump(mode="json")["stages"], sort_keys=True)
            key = hashlib.sha256(stages.encode()).hexdigest()
            images.setdefault(key, (env, []))[1].append((repo, version))
    buf = io.BytesIO()
    tarfile.open(fileobj=buf, mode="w:gz").close()
    empty = RepoSpec(tarball=base64.b64encode(buf.getvalue()).decode())
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    failed: list[str] = []
    args = ["--allow-network", "--env-cache-dir", cache_dir or tempfile.mkdtemp(prefix="swe-")]
    args += [f"--registry={h}" for h in registries]
    with start_service(workers=1, extra_args=args) as svc, svc.client() as client:
        for env, specs in tqdm(images.values(), desc="images", file=sys.stdout):
            task = Task(repo=empty, environment=env, timeout_s=120,  # type: ignore[arg-type]
                        test_command="python -c 'import sys; print(sys.version)'")  # fmt: skip
            r = client.run_task(task)
            ok = str(r.verdict) == "passed"
            for repo, _ in specs:
                rows[repo]["built"] += int(ok)
            if not ok:
                names = ", ".join(f"{repo} {v}" for repo, v in specs)
                tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])[:400]
                failed.append(f"{names}: {r.verdict}: {r.detail[:300]} ... {tail}")
    return rows, failed


def table(rows: dict[str, collections.Counter[str]], built: bool = False) -> str:
    b = " built |" if built else ""
    lines = [
        f"| repository | specs | before | plan | reads repo |{b}",
        "|---|---:|---:|---:|---:|" + ("---:|" if built else ""),
    ]
    tot: collections.Counter[str] = collections.Counter()
    orig: collections.Counter[str] = collections.Counter()
    for repo in sorted(rows, key=str.lower):
        c = rows[repo]
        before = BEFORE.get(repo, 0)
        mark = " *" if repo in ORIGINAL else ""
        cb = f" {c['built']} |" if built else ""
        lines.append(
            f"| {repo}{mark} | {c['specs']} | {before} | {c['plan']} | {c['reads_repo']} |{cb}"
        )
        for t in (tot, *([orig] if repo in ORIGINAL else [])):
            t.update({**c, "before": before})
    for name, t in (("all", tot), ("original 12 *", orig)):
        tb = f" {t['built']} |" if built else ""
        lines.append(
            f"| **{name}** | {t['specs']} | {t['before']} | {t['plan']} | {t['reads_repo']} |{tb}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--why", action="store_true", help="print the refusals, counted")
    ap.add_argument("--build", action="store_true", help="build the images (module docstring)")
    ap.add_argument("--registry", action="append", default=[], metavar="HOST",
                    help="a registry mirror with a private address (the service's --registry)")  # fmt: skip
    ap.add_argument("--cache-dir", default=None, help="the service's layer cache (kept)")
    args = ap.parse_args(argv)
    rows, why = count()
    failed: list[str] = []
    if args.build:
        built, failed = build(args.registry, args.cache_dir)
        for repo, c in built.items():
            rows[repo]["built"] = c["built"]
    print(table(rows, built=args.build))
    for line in failed:
        print(f"failed: {line}")
    if args.why:
        print()
        for reason, n in why.most_common():
            print(f"{n:4}  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
