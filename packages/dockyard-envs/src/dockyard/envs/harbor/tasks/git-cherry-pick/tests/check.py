"""Held-out checks: 0.5 for the history (one -x commit on main's tip), 0.5 for the behaviour.

The repository build is deterministic, so the commits' hashes are known in advance.
"""

import os
import re
import subprocess
import sys

MAIN_TIP = "eda554b6f77ab35c82b6838715da26b3c9f705e1"
RELEASE_TIP = "60204fcc046e7230f9e5f3ce8cb8b8ae204fd434"
FIX = "27a537a19efc629b080a9e393fa9d78985c83a39"
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def log(name, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {name}", file=sys.stderr)
    return ok


def history_ok():
    checks = [
        log(
            "one commit on main's tip",
            sh("git", "rev-parse", "HEAD^@").stdout.split() == [MAIN_TIP],
        ),
        log(
            "main checked out",
            sh("git", "symbolic-ref", "-q", "HEAD").stdout.strip() == "refs/heads/main",
        ),
        log(
            "-x line",
            f"(cherry picked from commit {FIX})" in sh("git", "log", "-1", "--format=%B").stdout,
        ),
        log(
            "release-1.x unchanged",
            sh("git", "rev-parse", "-q", "--verify", "refs/heads/release-1.x").stdout.strip()
            == RELEASE_TIP,
        ),
        log(
            "clean tree",
            sh("git", "status", "--porcelain", "--untracked-files=no").stdout.strip() == "",
        ),
        log(
            "only the fix's files",
            sorted(sh("git", "diff", "--name-only", MAIN_TIP, "HEAD").stdout.split())
            == ["shop/pager.py", "test_pager.py"],
        ),
    ]
    return all(checks)


def behaviour_ok():
    code = """
from shop.pager import page, page_count
assert page_count(10, 5) == 2 and page_count(0, 5) == 0 and page_count(11, 5) == 3
assert page_count(1, 500) == 1 and page_count(1000, 500) == 2 and page_count(1001, 500) == 3
items = list(range(120))
assert page(items, 1, 100) == list(range(100)), "page size capped"
assert page(items, 2, 100) == list(range(100, 120))
for bad_number in (0, 3):
    try:
        page(items, bad_number, 60)
    except IndexError:
        pass
    else:
        raise AssertionError(f"page {bad_number} of 2 did not raise")
for bad_size in (0, 501):
    try:
        page(items, 1, bad_size)
    except ValueError:
        pass
    else:
        raise AssertionError(f"size {bad_size} accepted")
"""
    r = sh(sys.executable, "-c", code)
    print(r.stderr[-1500:], file=sys.stderr)
    t = sh(sys.executable, "-m", "unittest", "-v", "test_pager")
    names = set(re.findall(r"^(test_\w+) .*\.\.\. ok$", t.stderr, re.M))
    version = None
    if os.path.exists("VERSION"):
        with open("VERSION") as f:
            version = f.read().strip()
    checks = [
        log("fix works, main's checks kept, no hotfix cap", r.returncode == 0),
        log(
            "repo tests incl. the fix's",
            t.returncode == 0 and {"test_count", "test_page", "test_exact_multiple"} <= names,
        ),
        log("VERSION 2.0.0-dev", version == "2.0.0-dev"),
        log(
            "no changelog, no old module",
            not os.path.exists("CHANGES.md") and not os.path.exists("pager.py"),
        ),
    ]
    return all(checks)


print(0.5 * history_ok() + 0.5 * behaviour_ok())
