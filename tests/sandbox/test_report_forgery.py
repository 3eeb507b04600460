"""Forging the per-test report from inside the code under test (the gap the ``split`` runner
closes), against the real service and real bwrap jails.

The forger writes a "call passed" record for its test to every file descriptor it has and to
every ``/proc/*/fd/*`` it can open, tries to ptrace and read the memory of its parent, then
``os._exit(0)``s before the assertion can fail. In ``plain`` mode the code under test shares
the report writer's process, so the forged record stands (shown below, which proves the attack
is real); in ``split`` mode the report writer never runs workspace code and the test fails."""

from __future__ import annotations

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.models import Task, Verdict

FORGER = r"""
import ctypes, glob, os

REC = b'{"k":"test","id":"test_sol.py::test_check","when":"call","outcome":"passed"}\n'


def forge():
    wrote = []
    for fd in range(3, 1024):
        try:
            os.write(fd, REC)
            wrote.append(fd)
        except OSError:
            pass
    for p in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            fd = os.open(p, os.O_WRONLY)
            os.write(fd, REC)
            wrote.append(p)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    print("ptrace-parent", libc.ptrace(16, os.getppid(), 0, 0))  # PTRACE_ATTACH
    try:
        open(f"/proc/{os.getppid()}/mem", "rb").close()
        print("MEM-OPENED")
    except OSError as e:
        print("mem", e.errno)
    print("parent", os.getppid())
    print("wrote", wrote, flush=True)
    os._exit(0)


def add(a, b):
    forge()
"""

CORRECT = "def add(a, b):\n    return a + b\n"
TEST = "from sol import *\n\n\ndef test_check():\n    assert add(2, 3) == 5\n"


def forgery_task(code: str, runner: str, *, held_out: bool = True) -> Task:
    files = {"sol.py": code}
    tests = {"test_sol.py": TEST}
    return Task(
        files=files if held_out else {**files, **tests},
        test_files=tests if held_out else {},
        tests={"fail_to_pass": ["test_sol.py::test_check"], "runner": runner},
        timeout_s=30,
    )


def test_split_runner_defeats_report_forgery(sandbox: SandboxClient) -> None:
    r = sandbox.run_task(forgery_task(FORGER, "split"))
    assert r.verdict == Verdict.failed, r
    assert r.tests["test_sol.py::test_check"] == "failed"
    assert not r.resolved
    assert "ptrace-parent -1" in r.stdout, r.stdout  # the judge is not dumpable
    assert "MEM-OPENED" not in r.stdout
    parent = r.stdout.split("parent ", 1)[1].split()[0]
    assert f"/proc/{parent}/" not in r.stdout, r.stdout  # no fd of the judge was writable
    ok = sandbox.run_task(forgery_task(CORRECT, "split"))
    assert ok.verdict == Verdict.passed, ok
    assert ok.tests["test_sol.py::test_check"] == "passed"


def test_the_same_forgery_beats_plain_mode(sandbox: SandboxClient) -> None:
    """Documents the residual gap of ``plain`` (and ``pytest``) mode: use ``split`` for
    held-out function-level tests (docs/sandbox.md, Integrity model)."""
    r = sandbox.run_task(forgery_task(FORGER, "plain"))
    assert r.tests["test_sol.py::test_check"] == "passed", r


def test_split_runner_values_cross_as_plain_data(sandbox: SandboxClient) -> None:
    code = (
        "class Eq(int):\n    def __eq__(self, o):\n        return True\n\n\n"
        "def add(a, b):\n    return Eq(-1)\n\n\n"
        "def pair(x):\n    return (x, {'k': {1, 2}}, float('inf'))\n"
    )
    test = (
        "import math\nfrom sol import add, pair\n\n\n"
        "def test_check():\n    assert add(2, 3) == 5\n\n\n"
        "def test_pair():\n    assert pair(1) == (1, {'k': {1, 2}}, math.inf)\n\n\n"
        "def test_exc():\n    try:\n        add.__call__(1)\n    except TypeError:\n        return\n"
        "    raise AssertionError('a wrong call is a TypeError, as in-process')\n"
    )
    ids = ["t.py::test_check", "t.py::test_pair", "t.py::test_exc"]
    r = sandbox.run_task(
        Task(
            files={"sol.py": code, "math.py": "isclose = lambda *a, **k: True\ninf = 0\n"},
            test_files={"t.py": test},
            tests={"pass_to_pass": ids, "runner": "split"},
        )
    )
    assert r.tests["t.py::test_check"] == "failed", r  # an always-equal object cannot cross
    assert r.tests["t.py::test_pair"] == "passed", r  # tuples, sets, dicts, inf survive; a
    assert r.tests["t.py::test_exc"] == "passed", r  # workspace math.py never shadows stdlib


def test_split_runner_needs_held_out_test_files(sandbox: SandboxClient) -> None:
    r = sandbox.run_task(forgery_task(CORRECT, "split", held_out=False))
    assert r.verdict == Verdict.infra_error
    assert "must be held out" in r.detail
