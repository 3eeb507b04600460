"""The ``pytest`` runner's two shortcuts, against the real service and in-process.

* **Narrowing**: only the items the test ids name are built (functions, classes, single
  parametrisations); what runs, and each verdict, is what a full collection would give.
* **Pre-rewritten held-out tests**: the service hands pytest the assertion-rewritten bytecode of
  each held-out test file in the read-only task mount (``sys.pycache_prefix``); a pyc planted in
  the workspace's ``__pycache__`` is never read, so it cannot stand in for a held-out test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dockyard.sandbox import pycache
from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.models import RepoSpec, Task, TestOutcome, Verdict
from dockyard.sandbox.testing import make_tarball
from dockyard.sandbox.toolchain import INSIDE_DIR

MANY = """\
import pytest


@pytest.mark.parametrize("n", range(50))
def test_even(n):
    assert n % 2 == 0


@pytest.mark.parametrize("a", [1, 2])
@pytest.mark.parametrize("b", ["x", "y"])
def test_pair(a, b):
    assert (a, b) != (2, "y")


def test_plain():
    assert True


def test_other():
    assert False


class TestGroup:
    @pytest.mark.parametrize("v", [0, 1, 2])
    def test_v(self, v):
        assert v < 2

    def test_w(self):
        assert True


@pytest.fixture(params=["p", "q"])
def letter(request):
    return request.param


def test_letter(letter):
    assert letter == "p"


@pytest.mark.parametrize("k", [1, 2])
def test_unmatched(k):
    assert True
"""

IDS = [
    "tests/test_many.py::test_even[4]",
    "tests/test_many.py::test_even[7]",
    "tests/test_many.py::test_pair[y-2]",
    "tests/test_many.py::test_pair[x-2]",
    "tests/test_many.py::test_plain",
    "tests/test_many.py::TestGroup::test_v[2]",
    "tests/test_many.py::test_letter[q]",
    "tests/test_many.py::test_even[99]",  # no such case (test_even's others are named)
    "tests/test_many.py::test_unmatched[3]",  # no such case, and none of its function named
]
EXPECTED = {
    "tests/test_many.py::test_even[4]": TestOutcome.passed,
    "tests/test_many.py::test_even[7]": TestOutcome.failed,
    "tests/test_many.py::test_pair[y-2]": TestOutcome.failed,
    "tests/test_many.py::test_pair[x-2]": TestOutcome.passed,
    "tests/test_many.py::test_plain": TestOutcome.passed,
    "tests/test_many.py::TestGroup::test_v[2]": TestOutcome.failed,
    "tests/test_many.py::test_letter[q]": TestOutcome.failed,
    "tests/test_many.py::test_even[99]": TestOutcome.missing,
    "tests/test_many.py::test_unmatched[3]": TestOutcome.missing,
}

_RECORDER = """\
import pytest

built, outcomes = [], {}


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector, name, obj):
    res = yield
    for item in res if isinstance(res, list) else [] if res is None else [res]:
        if isinstance(item, pytest.Item):
            built.append(item.nodeid)
    return res


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        outcomes[report.nodeid] = report.outcome
"""

_DRIVER = """\
import json, os, sys
sys.path.insert(0, sys.argv[1])
import pytest, recorder, runner

ids = json.loads(sys.argv[3])
args = ["-q", "-p", "no:cacheprovider", "-p", "recorder"]
if sys.argv[2] == "select":  # the runner's own entry point, as the sandbox calls it
    runner._out = os.open(os.devnull, os.O_WRONLY)
    runner.run_pytest(["--select", str(len(ids)), *args, *ids])
else:  # plain pytest given the ids
    pytest.main([*args, *ids])
print(json.dumps({"built": recorder.built, "outcomes": recorder.outcomes}))
"""


def _collect(tmp_path: Path, mode: str, ids: list[str]) -> dict:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_many.py").write_text(MANY)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "recorder.py").write_text(_RECORDER)
    r = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(INSIDE_DIR), mode, json.dumps(ids)],
        cwd=tmp_path,
        env={**os.environ, "DOCKYARD_WORKSPACE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_selection_builds_only_the_named_items_and_changes_no_outcome(tmp_path: Path) -> None:
    named = [i for i in IDS if EXPECTED[i] != TestOutcome.missing]
    full = _collect(tmp_path, "full", named)
    assert len(full["built"]) == 50 + 4 + 1 + 1 + 3 + 1 + 2 + 2
    assert set(full["outcomes"]) == set(named)
    select = _collect(tmp_path, "select", IDS)
    assert sorted(select["built"]) == sorted(
        [*named, "tests/test_many.py::test_unmatched[1]", "tests/test_many.py::test_unmatched[2]"]
    ), "a function none of whose cases is named is left whole"
    assert select["outcomes"] == full["outcomes"], "ids that name nothing must not stop the rest"
    nothing = _collect(tmp_path, "full", IDS)
    assert nothing["outcomes"] == {}, "plain pytest runs nothing when one id is not found"


def _many_task(ids: list[str], **kw: object) -> Task:
    return Task.model_validate(
        {
            "repo": RepoSpec(tarball=make_tarball({"README.md": "many\n"})),
            "test_files": {"tests/test_many.py": MANY, **kw.pop("extra_tests", {})},  # type: ignore[dict-item]
            "tests": {"fail_to_pass": ids, "pass_to_pass": []},
            "timeout_s": 60,
            **kw,
        }
    )


def test_named_items_get_the_verdicts_of_a_full_run(sandbox: SandboxClient) -> None:
    r = sandbox.run_task(_many_task(IDS))
    assert r.tests == {k: v.value for k, v in EXPECTED.items()}, r.stdout[-2000:]
    groups = ["TestGroup", "test_plain", "test_unmatched", "test_pair"]
    whole = sandbox.run_task(_many_task([f"tests/test_many.py::{g}" for g in groups]))
    # a class id selects every item under it (test_v[0..2], test_w) and reports under its id
    # the worst of them; so does a bare parametrised function's (all its cases)
    assert whole.tests == {
        "tests/test_many.py::TestGroup": "failed",  # test_v[2]
        "tests/test_many.py::test_plain": "passed",
        "tests/test_many.py::test_unmatched": "passed",  # [1] and [2]
        "tests/test_many.py::test_pair": "failed",  # [y-2]
    }, whole.stdout[-2000:]
    assert "9 passed, 2 failed" in whole.stdout or "2 failed, 9 passed" in whole.stdout, (
        whole.stdout
    )


def test_the_rewritten_pyc_is_what_pytest_would_cache(tmp_path: Path) -> None:
    if not pycache.supported():
        pytest.skip("this pytest caches mtime-checked pycs: the service makes none")
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test

    src = tmp_path / "test_x.py"
    src.write_text(MANY)
    pyc = pycache.rewritten_pyc(src.read_bytes(), str(src))
    assert pyc is not None
    cached = tmp_path / f"test_x{PYC_TAIL}"
    cached.write_bytes(pyc)
    co = _read_pyc(src, cached)
    assert co is not None, "pytest rejects the pyc"
    _, ref = _rewrite_test(src, None)  # type: ignore[arg-type]
    assert co == ref
    src.write_text(MANY + "\n# edited\n")
    assert _read_pyc(src, cached) is None, "a pyc for other content must be ignored"
    assert pycache.rewritten_pyc(b"def broken(:\n", str(src)) is None


PROBE = """\
import os, sys
from pathlib import Path


def test_runs_from_the_read_only_rewritten_pyc():
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

    assert sys.pycache_prefix == "/opt/dockyard-task/pycache"
    pyc = Path(sys.pycache_prefix + os.path.dirname(__file__)) / ("test_probe" + PYC_TAIL)
    st = os.stat(pyc)
    assert st.st_uid == 0 and not os.access(pyc, os.W_OK), (st.st_uid, oct(st.st_mode))
    assert _read_pyc(Path(__file__), pyc) is not None  # what pytest loaded it from
"""


def test_held_out_tests_run_from_the_services_pyc(sandbox: SandboxClient) -> None:
    if not pycache.supported():
        pytest.skip("this pytest caches mtime-checked pycs: the service makes none")
    r = sandbox.run_task(
        _many_task(
            ["tests/test_probe.py::test_runs_from_the_read_only_rewritten_pyc"],
            extra_tests={"tests/test_probe.py": PROBE},
        )
    )
    assert r.verdict == Verdict.passed, r.stdout[-3000:]


def _binary_patch(tmp_path: Path, rel: str, data: bytes) -> str:
    """A ``git diff --binary`` patch that adds ``rel`` with content ``data``."""
    repo = tmp_path / "forge"
    repo.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        git = ["git", "-c", "user.name=a", "-c", "user.email=a@b", *args]
        return subprocess.run(git, cwd=repo, check=True, capture_output=True)

    (repo / "README.md").write_text("many\n")
    run("init", "-q")
    run("add", "-A")
    run("commit", "-qm", "base")
    (repo / rel).parent.mkdir(parents=True)
    (repo / rel).write_bytes(data)
    run("add", "-A")
    return run("diff", "--cached", "--binary").stdout.decode()


def test_a_planted_pyc_cannot_replace_a_held_out_test(
    sandbox: SandboxClient, tmp_path: Path
) -> None:
    """The patch adds ``tests/__pycache__/test_many.<tag>.pyc``: a valid pytest pyc for the
    held-out file's exact content, whose code makes every test pass. Bytecode is only read
    from the task mount, so the real (failing) tests run."""
    if not pycache.supported():
        pytest.skip("this pytest caches mtime-checked pycs")
    import importlib.util
    import io

    from _pytest.assertion.rewrite import PYC_TAIL, _write_pyc_fp

    forged_src = "def test_other():\n    pass\n"
    co = compile(forged_src, "/workspace/tests/test_many.py", "exec", dont_inherit=True)
    buf = io.BytesIO()
    _write_pyc_fp(buf, importlib.util.source_hash(MANY.encode()), co)
    patch = _binary_patch(tmp_path, f"tests/__pycache__/test_many{PYC_TAIL}", buf.getvalue())
    r = sandbox.run_task(_many_task(["tests/test_many.py::test_other"], patch=patch))
    assert r.patch_applied, r.detail
    assert r.tests == {"tests/test_many.py::test_other": "failed"}, r.stdout[-2000:]
    assert r.verdict == Verdict.failed
