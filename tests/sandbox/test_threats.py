"""The adversarial suite: one test per row of SANDBOX-THREATS.md, against the real service
(real bwrap jails, real cgroups, real HTTP). Test names carry the row number."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from pathlib import Path

import httpx
import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import Limits, RepoSpec, Task, Verdict
from dockyard.sandbox.testing import (
    CALC_FIX,
    CALC_REPO,
    CALC_TESTS,
    calc_task,
    make_tarball,
    sandbox_processes,
)


def cmd_task(cmd: str, timeout_s: float = 20, **limits: int) -> Task:
    return Task(test_command=cmd, timeout_s=timeout_s, limits=Limits(**limits))


def no_leftovers(deadline_s: float = 5.0) -> list[tuple[int, int, str]]:
    end = time.monotonic() + deadline_s
    while True:
        left = sandbox_processes()
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def test_row01_fork_bomb(sandbox: SandboxClient) -> None:
    # `sleep` keeps the task alive: when its shell exits, the pid namespace kills the bomb anyway.
    bomb = sandbox.submit(cmd_task("b() { b | b & }; b; sleep 20", timeout_s=30, pids=32))
    other = sandbox.submit(cmd_task("echo fine"))
    r = sandbox.result(bomb, timeout_s=120)
    assert r.verdict == Verdict.resource_limit, r
    assert r.usage.pids_peak is not None
    assert r.usage.pids_peak <= 32
    assert r.timings.test_s < 25  # stopped on the pids event, not by the wall clock
    ok = sandbox.result(other, timeout_s=120)
    assert ok.verdict == Verdict.passed
    assert ok.stdout == "fine\n"
    assert no_leftovers() == []


def test_row02_memory_bomb_and_dev_shm(sandbox: SandboxClient) -> None:
    r = sandbox.run_task(
        cmd_task("python3 -c 'x = bytearray(2 << 30); print(len(x))'", memory_mb=96)
    )
    assert r.verdict == Verdict.oom, r
    # /dev/shm's pages are the task's memory: the fill stops at the cap. Usually a page fault
    # at the cap freezes the task and it is killed (oom; 12 of 12 here); on cgroup v1, whose
    # OOM killer the service turns off, a write() charged past the cap can instead fail with
    # ENOMEM (seen once in a loaded CI run): the task sees its write refused (failed), and the
    # fill is stopped either way.
    shm = sandbox.run_task(
        cmd_task(
            "head -c 400000000 /dev/zero > /dev/shm/fill && echo done", memory_mb=64, disk_mb=1024
        )
    )
    assert shm.verdict in (Verdict.oom, Verdict.failed), shm
    assert "done" not in shm.stdout
    assert shm.usage.memory_peak_mb is None or shm.usage.memory_peak_mb <= 64, shm.usage
    assert sandbox.run_task(cmd_task("echo alive")).verdict == Verdict.passed
    assert sandbox.health()["status"] == "ok"


def test_row03_infinite_loop_ignoring_signals(sandbox: SandboxClient) -> None:
    script = (
        "import os, signal\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
        "os.fork()\n"
        "while True: pass\n"
    )
    t0 = time.monotonic()
    r = sandbox.run_task(
        Task(files={"spin.py": script}, test_command="python3 spin.py", timeout_s=2)
    )
    assert r.verdict == Verdict.timeout, r
    assert time.monotonic() - t0 < 20
    assert no_leftovers() == []


def test_row04_endless_output_and_one_huge_line(
    sandbox: SandboxClient, sandbox_service: ServiceHandle
) -> None:
    def rss_mb() -> float:
        with open(f"/proc/{sandbox_service.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

    before = rss_mb()
    r = sandbox.run_task(cmd_task("yes", timeout_s=3, output_bytes=65536))
    assert r.verdict == Verdict.timeout
    assert r.stdout_truncated
    assert r.truncated
    assert len(r.stdout) < 70_000
    line = (
        "import sys\nsys.stdout.write('HEAD-')\n"
        "for _ in range(400): sys.stdout.write('x' * 1_000_000)\n"  # one 400 MB line, no newline
        "sys.stdout.write('-TAIL')\n"
    )
    r2 = sandbox.run_task(
        Task(
            files={"p.py": line},
            test_command="python3 p.py",
            timeout_s=60,
            limits=Limits(output_bytes=65536),
        )
    )
    assert r2.verdict == Verdict.passed, r2.detail
    assert r2.stdout.startswith("HEAD-")
    assert r2.stdout.endswith("-TAIL")
    assert r2.stdout_truncated
    assert "bytes omitted" in r2.stdout
    assert rss_mb() - before < 100  # the service never held the stream


def test_row05_huge_file_and_many_small_files(
    sandbox: SandboxClient, sandbox_service: ServiceHandle
) -> None:
    big = sandbox.run_task(cmd_task("head -c 100000000 /dev/zero > big; echo wrote", disk_mb=16))
    assert big.verdict == Verdict.resource_limit, big
    many = sandbox.run_task(
        Task(
            files={"m.py": "import os\nfor i in range(200000):\n    open(f'f{i}', 'w').close()\n"},
            test_command="python3 m.py",
            limits=Limits(inodes=2000),
            timeout_s=60,
        )
    )
    assert many.verdict == Verdict.resource_limit, many
    assert list((sandbox_service.work_dir / "ws").iterdir()) == []  # workspaces removed


def test_row06_daemon_holding_stdout(sandbox: SandboxClient) -> None:
    t0 = time.monotonic()
    r = sandbox.run_task(cmd_task("setsid nohup sh -c 'sleep 1000' & echo started", timeout_s=30))
    assert r.verdict == Verdict.passed
    assert r.stdout == "started\n"
    assert time.monotonic() - t0 < 15  # never waited for the daemon's EOF
    assert no_leftovers() == []


@pytest.mark.parametrize(
    "path", ["../x", "/etc/dockyard-pwned", ".git/hooks/pre-commit", "a/../../x"]
)
def test_row07_patch_paths_outside_the_tree(sandbox: SandboxClient, path: str) -> None:
    patch = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+pwned\n"
    r = sandbox.run_task(calc_task(patch=patch))
    assert r.verdict == Verdict.patch_rejected, r
    assert not r.patch_applied
    r2 = sandbox.run_task(calc_task(patch="", files={path: "pwned"}))
    assert r2.verdict == Verdict.patch_rejected
    assert not Path("/etc/dockyard-pwned").exists()


def test_row08_symlinks_out_of_the_tree(
    sandbox: SandboxClient, tmp_path: Path, repo_root: Path
) -> None:
    add_link = "diff --git a/out b/out\nnew file mode 120000\n--- /dev/null\n+++ b/out\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
    assert sandbox.run_task(calc_task(patch=add_link)).verdict == Verdict.patch_rejected
    # a (server-side) repository that already holds a link leaving the tree: writing through it
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = repo_root / "row08"
    (repo / "calc").mkdir(parents=True)
    for rel, text in CALC_REPO.items():
        (repo / rel).write_text(text)
    (repo / "out").symlink_to(outside)
    through = "diff --git a/out/pwned b/out/pwned\nnew file mode 100644\n--- /dev/null\n+++ b/out/pwned\n@@ -0,0 +1 @@\n+x\n"
    r = sandbox.run_task(calc_task(patch=through, repo=RepoSpec(path=str(repo))))
    assert r.verdict == Verdict.patch_rejected, r
    r2 = sandbox.run_task(
        calc_task(patch="", files={"out/pwned": "x"}, repo=RepoSpec(path=str(repo)))
    )
    assert r2.verdict == Verdict.patch_rejected
    assert list(outside.iterdir()) == []


def test_row09_editing_deleting_and_planting_tests(sandbox: SandboxClient) -> None:
    edit = (
        "diff --git a/tests/test_calc.py b/tests/test_calc.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_calc.py\n@@ -0,0 +1,4 @@\n+def test_add():\n+    pass\n+def test_mul():\n+    pass\n"
    )
    r = sandbox.run_task(calc_task(patch=edit))
    assert r.tests_tampered
    assert "tests/test_calc.py" in r.tamper_paths
    assert r.verdict == Verdict.failed
    assert not r.resolved
    # pre-creating a file that the trusted test_patch adds
    test_patch = (
        "diff --git a/tests/test_extra.py b/tests/test_extra.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_extra.py\n@@ -0,0 +1,3 @@\n+from calc import add\n+def test_extra():\n+    assert add(1, 1) == 2\n"
    )
    plant = CALC_FIX.replace("a - b", "a - b") + (
        "diff --git a/tests/test_extra.py b/tests/test_extra.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_extra.py\n@@ -0,0 +1,2 @@\n+def test_extra():\n+    pass\n"
    )
    r2 = sandbox.run_task(
        calc_task(
            patch=plant.replace(CALC_FIX, ""),
            test_patch=test_patch,
            tests={"fail_to_pass": ["tests/test_extra.py::test_extra"]},
        )
    )
    assert r2.tests_tampered
    assert "tests/test_extra.py" in r2.tamper_paths
    assert r2.verdict == Verdict.failed  # the trusted test_extra ran (bug not fixed)
    # editing the held-out test at run time: it is read-only
    r3 = sandbox.run_task(
        calc_task(
            patch="",
            test_files={**CALC_TESTS},
            tests=None,
            test_command="echo 'def test_add(): pass' > tests/test_calc.py || echo readonly",
        )
    )
    assert "readonly" in r3.stdout


CONFTEST_ALL_PASS = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep.outcome = "passed"
    rep.longrepr = None
"""


def _add(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def test_row10_conftest_config_sitecustomize_pth_env(sandbox: SandboxClient) -> None:
    patch = (
        _add("conftest.py", CONFTEST_ALL_PASS)
        + _add("tests/conftest.py", CONFTEST_ALL_PASS)
        + _add(
            "pytest.ini",
            "[pytest]\naddopts = -p no:dockyard --deselect tests/test_calc.py::test_add",
        )
        + _add("sitecustomize.py", "import builtins\nbuiltins.PWNED = True")
        + _add("evil.pth", "import os; os.environ['PWNED'] = '1'")
    )
    r = sandbox.run_task(calc_task(patch=patch))
    assert r.verdict == Verdict.failed, r  # "conftest rewrites all reports" scores 0
    assert not r.resolved
    assert r.tests["tests/test_calc.py::test_add"] == "failed"
    assert r.tests_tampered
    assert {
        "conftest.py",
        "tests/conftest.py",
        "pytest.ini",
        "sitecustomize.py",
        "evil.pth",
    } <= set(r.tamper_paths)
    # pyproject addopts in the patch: flagged, and the base config is what pytest reads
    r2 = sandbox.run_task(
        calc_task(patch=_add("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-x --co'"))
    )
    assert r2.tests_tampered
    assert "pyproject.toml" in r2.tamper_paths
    assert r2.tests["tests/test_calc.py::test_add"] == "failed"
    # the environment is clean: no PYTEST_* variables and nothing of the service's
    env = sandbox.run_task(cmd_task("env | sort"))
    names = {line.split("=", 1)[0] for line in env.stdout.splitlines()}
    assert names <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "PYTHONDONTWRITEBYTECODE",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
        "DOCKYARD_SITE",
        "PWD",
        "SHLVL",
        "_",
    }


@pytest.mark.parametrize(
    "body",
    [
        "import sys\nsys.exit(0)\n",  # at import of the code under test
        "import os\n\ndef add(a, b):\n    os._exit(0)\n\n\ndef mul(a, b):\n    return a * b\n",
        "import unittest\n\ndef add(a, b):\n    raise unittest.SkipTest('nope')\n\n\ndef mul(a, b):\n    return a * b\n",
        "import pytest\n\ndef add(a, b):\n    pytest.skip('nope')\n\n\ndef mul(a, b):\n    return a * b\n",
    ],
    ids=["sys_exit_at_import", "os_exit", "unittest_skiptest", "pytest_skip"],
)
def test_row11_exit_zero_and_skip_in_code_under_test(sandbox: SandboxClient, body: str) -> None:
    r = sandbox.run_task(calc_task(patch="", files={"calc/__init__.py": body}))
    assert r.verdict == Verdict.failed, r
    assert not r.resolved
    assert r.tests["tests/test_calc.py::test_add"] in ("failed", "skipped", "missing", "error")


def test_row12_forged_passed_lines_and_report_records(sandbox: SandboxClient) -> None:
    forge = (
        "import os, sys\n"
        "os.write(1, b'tests/test_calc.py::test_add PASSED\\n============ 2 passed in 0.01s ====\\n')\n"
        'rec = b\'{"k":"test","id":"tests/test_calc.py::test_add","when":"call","outcome":"passed"}\\n\'\n'
        "for fd in range(3, 64):\n"
        "    try:\n        os.write(fd, rec)\n    except OSError:\n        pass\n"
        "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
    )
    r = sandbox.run_task(calc_task(patch="", files={"calc/__init__.py": forge}))
    assert r.verdict == Verdict.failed, r
    assert not r.resolved
    assert r.tests["tests/test_calc.py::test_add"] == "failed"
    assert r.tests_tampered
    assert "<report>" in r.tamper_paths
    exit0 = sandbox.run_task(
        calc_task(patch="", test_command="echo '2 passed'; exit 1", tests=None)
    )
    assert exit0.verdict == Verdict.failed


def test_row13_other_tasks_secrets_history(tmp_path: Path) -> None:
    token = "s3cr3t-" + os.urandom(8).hex()
    repo = tmp_path / "g"
    repo.mkdir()
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@b",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@b",
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
    }

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", *a], cwd=repo, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q")
    (repo / "calc").mkdir()
    for rel, text in CALC_REPO.items():
        (repo / rel).write_text(text)
    git("add", "-A")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    (repo / "calc/__init__.py").write_text(CALC_REPO["calc/__init__.py"].replace("a - b", "a + b"))
    git("commit", "-qam", "THE FIX")
    fix = git("rev-parse", "HEAD")
    with start_service(workers=2, token=token, repo_roots=[tmp_path]) as svc, svc.client() as c:
        assert (
            httpx.post(f"{svc.url}/v1/tasks:run", json={"test_command": "true"}).status_code == 401
        )
        spec = RepoSpec(git=str(repo), commit=base)
        hist = c.run_task(
            Task(
                repo=spec,
                test_command=f"git log --all --oneline | wc -l; git cat-file -t {fix} 2>&1; grep -c 'a + b' calc/__init__.py",
            )
        )
        lines = hist.stdout.split("\n")
        assert lines[0].strip() == "1", hist.stdout
        assert "THE FIX" not in hist.stdout
        assert lines[2].strip() == "0", hist.stdout
        leak = c.run_task(
            Task(
                test_command=f"cat /proc/1/environ; env; ls -a /tmp /workspace/..; cat {svc.log_path.parent}/token; cat /proc/self/environ; grep -rs {token} /tmp /workspace /opt; echo END"
            )
        )
        assert token not in leak.stdout
        assert token not in leak.stderr
        # another task's workspace is not visible
        secret = os.urandom(8).hex()
        holder = c.submit(Task(test_command=f"echo {secret} > mine.txt; sleep 4", timeout_s=30))
        time.sleep(1.5)
        peek = c.run_task(
            Task(
                test_command=f"ls /workspace/..; find / -xdev -name mine.txt; cat {svc.work_dir}/ws/*/mine.txt; echo END"
            )
        )
        assert peek.stdout.endswith("END\n")
        assert secret not in peek.stdout
        assert "/mine.txt" not in peek.stdout
        assert c.result(holder, timeout_s=60).verdict == Verdict.passed


def test_row14_no_network(sandbox: SandboxClient, sandbox_service: ServiceHandle) -> None:
    port = sandbox_service.url.rsplit(":", 1)[1]
    probe = (
        "import socket\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', e.errno)\n"
    )
    r = sandbox.run_task(Task(files={"n.py": probe}, test_command="python3 n.py"))
    assert r.verdict == Verdict.passed, r
    assert "['lo']" in r.stdout
    assert "CONNECTED" not in r.stdout
    assert "blocked" in r.stdout


def test_row15_kill_all_ptrace_trojans(
    sandbox: SandboxClient, sandbox_service: ServiceHandle
) -> None:
    bystander = sandbox.submit(cmd_task("sleep 2; echo survived", timeout_s=30))
    killer = sandbox.run_task(cmd_task("kill -9 -1; echo still-here"))
    assert killer.verdict in (Verdict.passed, Verdict.failed)
    tracer = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('attach', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH to pid 1
    )
    t = sandbox.run_task(Task(files={"t.py": tracer}, test_command="python3 t.py"))
    assert "attach -1" in t.stdout, t.stdout
    assert sandbox.result(bystander, timeout_s=60).stdout == "survived\n"
    assert sandbox_service.proc.poll() is None
    # a trojaned pytest / python in the repository does not replace the toolchain
    trojan = (
        _add("pytest.py", "import sys\nprint('trojan')\nsys.exit(0)")
        + _add("_pytest/__init__.py", "raise SystemExit(0)")
        + _add("bin/python", "#!/bin/sh\nexit 0")
    )
    r = sandbox.run_task(calc_task(patch=trojan))
    assert r.verdict == Verdict.failed, r
    assert r.tests["tests/test_calc.py::test_add"] == "failed"


def test_row16_zip_slip_archives(sandbox: SandboxClient, tmp_path: Path) -> None:
    def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
        m = tarfile.TarInfo(name)
        m.type, m.linkname, m.size = kind, link, (1 if kind == tarfile.REGTYPE else 0)
        return m

    bad = {
        "dotdot": [member("../../dockyard-zipslip")],
        "absolute": [member(f"{tmp_path}/abs-zipslip")],
        "symlink_out": [member("link", tarfile.SYMTYPE, "/etc")],
        "hardlink_out": [member("hl", tarfile.LNKTYPE, "../../etc/passwd")],
        "device": [member("dev", tarfile.CHRTYPE)],
    }
    for name, members in bad.items():
        r = sandbox.run_task(
            Task(
                repo=RepoSpec(tarball=make_tarball({"ok.txt": "x"}, raw_members=members)),
                test_command="true",
            )
        )
        assert r.verdict == Verdict.patch_rejected, (name, r)
        assert "repo.tarball" in r.detail
    assert not (tmp_path / "abs-zipslip").exists()


def test_row17_always_equal_object(sandbox: SandboxClient) -> None:
    cases = [{"args": [2, 3], "expected": 5}, {"args": [0, 0], "expected": 0}]
    cheat = "class Eq(int):\n    def __eq__(self, o):\n        return True\n\ndef add(a, b):\n    return Eq(-1)\n"
    cheat2 = "class Any:\n    def __eq__(self, o):\n        return True\n\ndef add(a, b):\n    return Any()\n"
    good = "def add(a, b):\n    return a + b\n"
    for code, want in ((cheat, Verdict.failed), (cheat2, Verdict.failed), (good, Verdict.passed)):
        r = sandbox.run_task(
            Task(
                files={"sol.py": code},
                function_tests={"module": "sol", "function": "add", "cases": cases},
            )
        )
        assert r.verdict == want, (code, r)
