"""Held-out checks: 0.5 for the merge commit's history, 0.5 for both features working.

The repository build is deterministic, so the two parents' hashes are known in advance.
Leftover conflict markers in any tracked file score 0.
"""

import os
import re
import subprocess
import sys

MAIN_TIP = "e613dbb0ce6beb7c7821a18d3fbf5289dcde0c90"
FEATURE_TIP = "6386bc43b0e8cc0f0015867f08561d2fe135041b"
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"


def sh(*cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)


def log(msg):
    print(msg, file=sys.stderr)


def history_ok():
    head = sh("git", "rev-parse", "HEAD^@").stdout.split()
    branch = sh("git", "symbolic-ref", "-q", "HEAD").stdout.strip()
    clean = sh("git", "status", "--porcelain", "--untracked-files=no").stdout.strip() == ""
    log(f"parents={head} branch={branch} clean={clean}")
    return head == [MAIN_TIP, FEATURE_TIP] and branch == "refs/heads/main" and clean


def cli(*args):
    return sh(sys.executable, "cli.py", *args)


def behaviour_ok():
    checks = []
    r = cli("1", "mi", "km")
    checks.append(("mi->km", r.returncode == 0 and r.stdout.strip() == "1.609 km"))
    r = cli("--precision", "1", "12", "inches", "cm")
    checks.append(("precision+alias", r.returncode == 0 and r.stdout.strip() == "30.5 cm"))
    r = cli("2500", "mm", "feet", "--precision", "2")
    checks.append(("mm->feet", r.returncode == 0 and r.stdout.strip() == "8.20 feet"))
    r = cli("3", "km", "m")
    checks.append(("default precision", r.returncode == 0 and r.stdout.strip() == "3000.000 m"))
    r = cli("1", "parsec", "m")
    checks.append(("unknown src", r.returncode == 2 and "unknown unit: parsec" in r.stderr))
    r = cli("1", "miles", "furlong")
    checks.append(("unknown dst", r.returncode == 2 and "unknown unit: furlong" in r.stderr))
    r = cli("--list")
    checks.append(
        (
            "--list",
            r.returncode == 0 and r.stdout.split() == ["cm", "ft", "in", "km", "m", "mi", "mm"],
        )
    )
    code = """
import units
assert abs(units.convert(2, "mile", "foot") - 10560) < 1e-6
assert abs(units.convert(1, "inch", "mm") - 25.4) < 1e-9
try:
    units.convert(1, "m", "yard")
except ValueError as e:
    assert "unknown unit: yard" in str(e)
else:
    raise AssertionError("no ValueError")
assert units.units() == ["cm", "ft", "in", "km", "m", "mi", "mm"]
"""
    r = sh(sys.executable, "-c", code)
    checks.append(("api", r.returncode == 0))
    r = sh(sys.executable, "-m", "unittest", "-v", "test_units")
    names = set(re.findall(r"^(test_\w+) .*\.\.\. ok$", r.stderr, re.M))
    want = {"test_metric", "test_mm", "test_unknown", "test_imperial", "test_aliases"}
    checks.append(("repo tests (both branches)", r.returncode == 0 and want <= names))
    for name, ok in checks:
        log(f"{'ok  ' if ok else 'FAIL'} {name}")
    return all(ok for _, ok in checks)


def markers():
    bad = []
    for name in sh("git", "ls-files").stdout.split():
        if os.path.isfile(name):
            with open(name, errors="replace") as f:
                if re.search(r"^(<{7}|>{7}|={7})( |$)", f.read(), re.M):
                    bad.append(name)
    log(f"conflict markers in: {bad}")
    return bad


if markers():
    print(0)
else:
    print(0.5 * history_ok() + 0.5 * behaviour_ok())
