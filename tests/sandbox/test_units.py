"""Unit tests of the pure parts: path rules, patch headers, tar safety, capture, report parsing."""

from __future__ import annotations

import base64
import os
import tarfile
from pathlib import Path

import pytest

from dockyard.sandbox.capture import HeadTail
from dockyard.sandbox.executor import outcomes_from_calls, outcomes_from_report
from dockyard.sandbox.integrity import is_neutralised, pytest_section
from dockyard.sandbox.models import FunctionTests, Task
from dockyard.sandbox.patches import parse
from dockyard.sandbox.paths import UnsafePath, check_no_links, check_rel, force_write, read_file
from dockyard.sandbox.repos import RepoError, safe_extract
from dockyard.sandbox.testing import CALC_FIX, make_tarball


@pytest.mark.parametrize(
    "bad",
    ["", "/etc/x", "../x", "a/../../x", "a/./b", ".git/hooks/x", "a/.git/config", "a\\b", "a\x00b"],
)
def test_check_rel_rejects(bad: str) -> None:
    with pytest.raises(UnsafePath):
        check_rel(bad)


def test_check_rel_normalises() -> None:
    assert check_rel("a//b/c.py") == "a/b/c.py"


def test_resolve_and_write_never_follow_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(UnsafePath):
        check_no_links(root, "link/x")
    (root / "f").symlink_to("/etc/passwd")
    with pytest.raises(UnsafePath):
        read_file(root, "f", 1 << 20)
    # force_write replaces a symlink leaf or parent instead of writing through it
    force_write(root, "link/x", b"data", uid=0, gid=0)
    assert list(outside.iterdir()) == []
    assert (root / "link" / "x").read_bytes() == b"data"


def test_patch_parse() -> None:
    info = parse(CALC_FIX)
    assert info.touched == ["calc/__init__.py"]
    new = "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n"
    assert parse(new).added == ["n.py"]
    for bad in (
        "--- a/../x\n+++ b/../x\n",
        "diff --git a/x b/x\nnew file mode 120000\n--- /dev/null\n+++ b/x\n",
        "--- /dev/null\n+++ /etc/passwd\n",
        "diff --git a/x b/y\nrename from x\nrename to .git/config\n",
    ):
        with pytest.raises(UnsafePath):
            parse(bad)


def test_safe_extract(tmp_path: Path) -> None:
    good = base64.b64decode(make_tarball({"a/b.txt": "hi"}))
    safe_extract(good, tmp_path / "ok")
    assert (tmp_path / "ok/a/b.txt").read_text() == "hi"
    m = tarfile.TarInfo("../evil")
    m.size = 1
    with pytest.raises(RepoError):
        safe_extract(base64.b64decode(make_tarball({}, raw_members=[m])), tmp_path / "bad")
    with pytest.raises(RepoError):
        safe_extract(b"not a tar", tmp_path / "bad2")


def test_head_tail_keeps_both_ends_in_bounded_memory() -> None:
    h = HeadTail(100)
    h.feed(b"HEAD")
    for _ in range(1000):
        h.feed(b"x" * 1000)
    h.feed(b"TAIL")
    text = h.text()
    assert h.truncated
    assert text.startswith("HEAD")
    assert text.endswith("TAIL")
    assert len(h._head) + len(h._tail) == 100
    small = HeadTail(100)
    small.feed(b"abc")
    assert not small.truncated
    assert small.text() == "abc"


def test_outcomes_from_report() -> None:
    def rec(i, w, o, **kw):
        return (
            '{{"k":"test","id":"{}","when":"{}","outcome":"{}"{}}}'.format(
                i, w, o, "".join(f',"{k}":{v}' for k, v in kw.items())
            )
        ).encode()

    raw = b"\n".join(
        [
            rec("t::a", "setup", "passed"),
            rec("t::a", "call", "passed"),
            rec("t::a", "teardown", "passed"),
            rec("t::b", "setup", "passed"),
            rec("t::b", "call", "failed"),
            rec("t::c", "setup", "skipped"),
            rec("t::d", "setup", "failed"),
            rec("t::e", "setup", "passed"),  # killed during the call
            rec("t::f", "setup", "passed"),
            rec("t::f", "call", "skipped", xfail="true"),
            rec("t::g", "call", "passed"),
            rec("t::g", "call", "failed"),  # forged duplicate
            b"garbage",
        ]
    )
    out, problems = outcomes_from_report(
        raw, ["t::a", "t::b", "t::c", "t::d", "t::e", "t::f", "t::g", "t::h"]
    )
    assert out == {
        "t::a": "passed",
        "t::b": "failed",
        "t::c": "skipped",
        "t::d": "error",
        "t::e": "missing",
        "t::f": "skipped",
        "t::g": "failed",
        "t::h": "missing",
    }
    assert any("duplicate" in p for p in problems)
    assert any("unreadable" in p for p in problems)
    # an id naming a parametrised function, a class or a file: the worst of its cases
    cases = b"\n".join(
        [
            rec("t::p[1]", "call", "passed"),
            rec("t::p[2]", "call", "passed"),
            rec("t::q[1]", "call", "passed"),
            rec("t::q[2]", "call", "failed"),
            rec("t::r[1]", "setup", "skipped"),
            rec("t::C::x", "call", "passed"),
            rec("t::C::y[a]", "setup", "skipped"),
        ]
    )
    out, _ = outcomes_from_report(cases, ["t::p", "t::q", "t::r", "t::C", "t::pp", "t"])
    assert out == {
        "t::p": "passed",
        "t::q": "failed",
        "t::r": "skipped",
        "t::C": "passed",
        "t::pp": "missing",  # a name that only starts like another's is not one of its cases
        "t": "failed",
    }


def test_outcomes_from_calls_compares_plain_values() -> None:
    ft = FunctionTests(
        module="m",
        function="f",
        cases=[
            {"args": [], "expected": [1, 2.0]},
            {"args": [], "expected": True},
            {"args": [], "expected": 1},
        ],
    )
    raw = b'{"k":"case","i":0,"ok":true,"value":[1.0,2]}\n{"k":"case","i":1,"ok":true,"value":1}\n'
    out, _ = outcomes_from_calls(raw, ft)
    assert out == {"case[0]": "passed", "case[1]": "failed", "case[2]": "missing"}  # True != 1


def test_neutralised_and_config_sections(tmp_path: Path) -> None:
    assert is_neutralised("a/conftest.py")
    assert is_neutralised("x.pth")
    assert is_neutralised("sitecustomize.py")
    assert not is_neutralised("tests/test_conftest.py")
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    assert pytest_section(tmp_path, "pyproject.toml") is None
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts='-x'\n")
    assert pytest_section(tmp_path, "pyproject.toml") is not None


def test_task_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="exactly one of test_command, tests, function_tests"):
        Task(patch="")
    with pytest.raises(ValueError, match="only one of path / tarball / git"):
        Task(repo={"path": "/x", "tarball": "eA=="}, test_command="true")


def test_the_service_tmpfs_is_mounted_replaced_and_released(tmp_path: Path) -> None:
    from dockyard.sandbox.workspace import Workspaces

    ws = Workspaces(tmp_path / "ws")
    if not ws.tmpfs:
        pytest.skip("the service may not mount here (not root): a plain directory is used")
    trusted = ws.service_tmpfs(tmp_path / "trusted")
    assert os.path.ismount(trusted)
    assert oct(os.stat(trusted).st_mode & 0o777) == "0o711"
    (trusted / "left-by-a-killed-service").write_text("x")
    again = Workspaces(tmp_path / "ws")  # the next service, same work dir
    again.service_tmpfs(tmp_path / "trusted")
    assert os.listdir(trusted) == [], "a stale mount is replaced by an empty one"
    ws._mounts.clear()  # the first service's mount was detached by the second
    again.close()
    assert not os.path.ismount(trusted)
