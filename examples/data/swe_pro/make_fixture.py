"""Write ``instances.jsonl``: four SWE-bench Pro-format instances of a tiny local repository.

    python examples/data/swe_pro/make_fixture.py      # rewrites instances.jsonl beside it

The repository (``dockyard-examples/tinycalc``: ``tinycalc.py`` + ``tests/test_tinycalc.py``)
imports ``tinyunits``, which only its provisioned environment has (``specs.yaml`` beside this
file: the install step writes it into the environment's prefix). Each instance has one bug at its
base; ``patch`` fixes it, ``test_patch`` adds the test that finds it (``fail_to_pass``), the other
tests are ``pass_to_pass``. The fields are SWE-bench Pro's public layout
(``ScaleAI/SWE-bench_Pro``: lower-case ``fail_to_pass`` / ``pass_to_pass`` as Python-literal
strings, ``requirements``, ``interface``, ``repo_language``, ...), plus ``repo_tarball`` (base64
``.tar.gz`` of the base tree: where the sandbox finds the repository, offline), and Pro's
environment fields written in its published shape (not copied): ``base_dockerfile`` (``FROM
python:3.11-slim``, ``git clone`` of the repository, ``git checkout`` of its commit),
``instance_dockerfile`` (``FROM base_...``, ``ENV``, a heredoc script that resets the repository)
and ``before_repo_set_cmd`` (reset to the base, then ``git checkout <fix> -- <test file>``: the
held-out test, which ``test_patch`` carries). Deterministic.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from dockyard.envs.swe.instance import unified_diff
from dockyard.envs.swe.sdist import tarball

REPO = "dockyard-examples/tinycalc"
GOOD = '''"""Tiny calculator helpers."""

import tinyunits


def add(a, b):
    return a + b


def clamp(x, lo, hi):
    return max(lo, min(x, hi))


def mean(xs):
    return sum(xs) / len(xs)


def scale(x):
    return x * tinyunits.SCALE
'''
TESTS = {
    "add": "def test_add():\n    assert add(2, 3) == 5\n",
    "clamp": "def test_clamp():\n    assert clamp(7, 0, 5) == 5\n    assert clamp(-1, 0, 5) == 0\n",
    "mean": "def test_mean():\n    assert mean([1, 2, 3]) == 2\n",
    "scale": "def test_scale():\n    assert scale(3) == 30\n",
}
BUGS = {  # function: (correct, buggy, issue)
    "add": ("return a + b", "return a - b", "add(2, 3) returns -1 instead of 5."),
    "clamp": (
        "max(lo, min(x, hi))",
        "max(lo, min(x, lo))",
        "clamp(7, 0, 5) returns 0: values inside or above the range all come back as the lower bound.",
    ),
    "mean": (
        "sum(xs) / len(xs)",
        "sum(xs) / (len(xs) + 1)",
        "mean([1, 2, 3]) returns 1.5 instead of 2.",
    ),
    "scale": (
        "x * tinyunits.SCALE",
        "x + tinyunits.SCALE",
        "scale(3) returns 13; it should multiply by tinyunits.SCALE (10) and return 30.",
    ),
}
HEADER = "from tinycalc import add, clamp, mean, scale\n"
TEST_FILE = "tests/test_tinycalc.py"


def test_file(names: list[str]) -> str:
    return HEADER + "".join("\n\n" + TESTS[n] for n in names)


BASE_DOCKERFILE = """FROM python:3.11-slim

# the repository is always at /app
RUN mkdir /app
WORKDIR /app

RUN apt-get update && apt-get install -y \\
    git \\
    && rm -rf /var/lib/apt/lists/*

RUN git clone https://github.com/dockyard-examples/tinycalc.git .
RUN git checkout {base}

ENTRYPOINT ["/bin/bash"]
"""
INSTANCE_DOCKERFILE = """FROM base_dockyard-examples__tinycalc___{base}

ENV PYTEST_ADDOPTS="--tb=short -v"

RUN cat <<'EOFPREP' > /preprocess.sh
#!/bin/bash
cd /app
git reset --hard {base}
git clean -fdx
git checkout {base}
cd /
EOFPREP
RUN chmod +x /preprocess.sh
RUN /preprocess.sh
"""
BEFORE_REPO_SET = (
    "git reset --hard {base}\ngit clean -fd \ngit checkout {base} \ngit checkout {fix} -- {tests}"
)


def instance(name: str) -> dict:
    good, bad, issue = BUGS[name]
    buggy = GOOD.replace(good, bad)
    others = [n for n in TESTS if n != name]
    base_tests = test_file(others)
    files = {"tinycalc.py": buggy.encode(), TEST_FILE: base_tests.encode()}
    tar = tarball(files)
    base = hashlib.sha1(tar).hexdigest()
    fix = hashlib.sha1(tar + GOOD.encode()).hexdigest()
    return {
        "instance_id": f"dockyard-examples__tinycalc-{name}",
        "repo": REPO,
        "base_commit": base,
        "patch": unified_diff("tinycalc.py", buggy, GOOD),
        "test_patch": unified_diff(TEST_FILE, base_tests, test_file([*others, name])),
        "problem_statement": f"{name}() is wrong\n\n{issue}",
        "requirements": "Fix the function so that it behaves as described; keep the others as they are.",
        "interface": "No new interfaces are introduced.",
        "repo_language": "python",
        "issue_specificity": "['minor_bug']",
        "issue_categories": "['logic_bug']",
        "fail_to_pass": repr([f"{TEST_FILE}::test_{name}"]),
        "pass_to_pass": repr([f"{TEST_FILE}::test_{n}" for n in others]),
        "selected_test_files_to_run": repr([TEST_FILE]),
        "before_repo_set_cmd": BEFORE_REPO_SET.format(base=base, fix=fix, tests=TEST_FILE),
        "base_dockerfile": BASE_DOCKERFILE.format(base=base),
        "instance_dockerfile": INSTANCE_DOCKERFILE.format(base=base),
        "repo_tarball": base64.b64encode(tar).decode(),
    }


def main() -> None:
    out = Path(__file__).with_name("instances.jsonl")
    out.write_text("".join(json.dumps(instance(n)) + "\n" for n in BUGS))
    print(f"wrote {out} ({len(BUGS)} instances)")


if __name__ == "__main__":
    main()
