"""The ``unshare`` fallback backend and the refused-unless-asked ``none`` mode, against the real
service. The unshare rows repeat the threat suite's probes (SANDBOX-THREATS.md rows 1, 3, 6, 9,
10, 13, 14, 15) with ``--isolation unshare`` forced, so the fallback is held to the same bar."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import Limits, Task, Verdict
from dockyard.sandbox.testing import calc_task, sandbox_processes
from dockyard.sandbox.toolchain import INSIDE_DIR

SECRET_ENV = "DOCKYARD_ISOLATION_TEST_SECRET"
SECRET = "env-secret-" + os.urandom(6).hex()


def cmd_task(cmd: str, timeout_s: float = 20, **limits: int) -> Task:
    return Task(test_command=cmd, timeout_s=timeout_s, limits=Limits(**limits))


def no_leftovers(deadline_s: float = 5.0) -> list[tuple[int, int, str]]:
    end = time.monotonic() + deadline_s
    while (left := sandbox_processes()) and time.monotonic() < end:
        time.sleep(0.1)
    return left


@pytest.fixture(scope="module")
def unshare_service() -> Iterator[ServiceHandle]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, SECRET)  # in the service's environment, never in a task's
        svc = start_service(workers=2, extra_args=["--isolation", "unshare"])
    with svc:
        yield svc


@pytest.fixture(scope="module")
def ux(unshare_service: ServiceHandle) -> Iterator[SandboxClient]:
    with unshare_service.client() as c:
        yield c


def test_unshare_is_flagged_loudly(ux: SandboxClient, unshare_service: ServiceHandle) -> None:
    iso = ux.health()["isolation"]
    assert iso["mode"] == "unshare"
    assert any("ISOLATION FALLBACK" in w for w in iso["warnings"]), iso
    assert "ISOLATION FALLBACK" in unshare_service.log()


def test_unshare_held_out_tests_and_integrity(ux: SandboxClient) -> None:
    assert ux.run_task(calc_task()).verdict == Verdict.passed
    broken = ux.run_task(calc_task(patch=""))
    assert broken.verdict == Verdict.failed
    assert broken.tests["tests/test_calc.py::test_add"] == "failed"
    # row 9: the held-out test file is a read-only bind; row 10: a planted conftest is flagged
    conftest = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import pytest\n+pytest.exit('bye', 0)\n"
    )
    r = ux.run_task(
        calc_task(
            patch=conftest,
            files={"tests/test_calc.py": "def test_add():\n    pass\n"},
        )
    )
    assert r.verdict == Verdict.failed, r
    assert r.tests_tampered
    assert {"conftest.py", "tests/test_calc.py"} <= set(r.tamper_paths)


def test_unshare_row14_no_network(ux: SandboxClient, unshare_service: ServiceHandle) -> None:
    port = unshare_service.url.rsplit(":", 1)[1]
    probe = (
        "import socket\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname(), timeout=2); print('own-loopback-ok')\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', e.errno)\n"
    )
    r = ux.run_task(Task(files={"n.py": probe}, test_command="python3 n.py"))
    assert r.verdict == Verdict.passed, r
    assert "['lo']" in r.stdout
    assert "own-loopback-ok" in r.stdout
    assert "CONNECTED" not in r.stdout
    assert "blocked" in r.stdout


def test_unshare_row13_host_files_env_and_workspaces(
    ux: SandboxClient, unshare_service: ServiceHandle, tmp_path: Path
) -> None:
    host_secret = os.urandom(8).hex()
    world_readable = tmp_path / "host-secret.txt"
    world_readable.write_text(host_secret)
    os.chmod(tmp_path, 0o755)
    os.chmod(world_readable, 0o644)  # readable by any uid on the host: only the mount ns hides it
    probe = (
        f"cat {world_readable}; ls {unshare_service.work_dir}; "
        f"cat /proc/1/environ /proc/self/environ; env; "
        "for d in /usr /etc /opt/dockyard /; do touch $d/pwned 2>/dev/null && echo WROTE $d; done; "
        f"grep -rs {SECRET} /proc/*/environ; echo END"
    )
    r = ux.run_task(cmd_task(probe))
    assert r.stdout.endswith("END\n"), r
    assert host_secret not in r.stdout
    assert SECRET not in r.stdout + r.stderr
    assert "WROTE" not in r.stdout
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines() if "=" in line}
    assert SECRET_ENV not in names
    assert not Path("/usr/pwned").exists()
    # another task's workspace is invisible
    mine = os.urandom(8).hex()
    holder = ux.submit(cmd_task(f"echo {mine} > mine.txt; sleep 4", timeout_s=30))
    time.sleep(1.5)
    peek = ux.run_task(
        cmd_task(
            f"find / -xdev -name mine.txt; cat {unshare_service.work_dir}/ws/*/mine.txt; echo END"
        )
    )
    assert peek.stdout.endswith("END\n")
    assert mine not in peek.stdout
    assert ux.result(holder, timeout_s=60).verdict == Verdict.passed


def test_unshare_row03_timeout_kills_the_tree(ux: SandboxClient) -> None:
    script = (
        "import os, signal\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
        "os.fork()\n"
        "while True: pass\n"
    )
    t0 = time.monotonic()
    r = ux.run_task(Task(files={"spin.py": script}, test_command="python3 spin.py", timeout_s=2))
    assert r.verdict == Verdict.timeout, r
    assert time.monotonic() - t0 < 20
    assert no_leftovers() == []


def test_unshare_row06_row15_pid_namespace(
    ux: SandboxClient, unshare_service: ServiceHandle
) -> None:
    daemon = ux.run_task(cmd_task("setsid nohup sh -c 'sleep 1000' & echo started", timeout_s=30))
    assert daemon.verdict == Verdict.passed
    assert daemon.stdout == "started\n"
    assert no_leftovers() == []
    bystander = ux.submit(cmd_task("sleep 2; echo survived", timeout_s=30))
    ps = ux.run_task(
        cmd_task(f"ls /proc | grep -c '^[0-9]'; kill -9 {unshare_service.pid} -1; echo still-here")
    )
    assert int(ps.stdout.split()[0]) < 10, ps.stdout  # only this task's few processes
    assert ux.result(bystander, timeout_s=60).stdout == "survived\n"
    assert unshare_service.proc.poll() is None


def test_unshare_row01_fork_bomb(ux: SandboxClient) -> None:
    bomb = ux.run_task(cmd_task("b() { b | b & }; b; sleep 20", timeout_s=30, pids=32))
    assert bomb.verdict == Verdict.resource_limit, bomb
    assert no_leftovers() == []


def test_auto_falls_back_to_unshare_without_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKYARD_SANDBOX_BWRAP", "/nonexistent/bwrap")
    with start_service(workers=1) as svc, svc.client() as c:
        iso = c.health()["isolation"]
        assert iso["mode"] == "unshare"
        assert any("ISOLATION FALLBACK" in w for w in iso["warnings"])
        assert c.run_task(cmd_task("echo hi")).stdout == "hi\n"


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dockyard.sandbox.cli", "serve", "--port", "0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_none_is_refused_without_the_flag() -> None:
    r = _serve("--isolation", "none")
    assert r.returncode == 2
    assert "--i-understand-this-is-unsafe" in r.stderr


def test_explicit_bwrap_missing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKYARD_SANDBOX_BWRAP", "/nonexistent/bwrap")
    r = _serve("--isolation", "bwrap")
    assert r.returncode == 2
    assert "apt-get install -y bubblewrap" in r.stderr


def test_none_with_the_flag_runs_and_is_flagged(tmp_path: Path) -> None:
    unsafe = ["--isolation", "none", "--i-understand-this-is-unsafe"]
    with pytest.raises(RuntimeError, match="not traversable by the task uids"):
        start_service(workers=1, work_dir=tmp_path / "w", extra_args=unsafe)  # 0700 parents
    work = Path(tempfile.mkdtemp(prefix="dockyard-none-"))
    os.chmod(work, 0o755)
    closed = next((d for d in INSIDE_DIR.resolve().parents if not os.stat(d).st_mode & 0o001), None)
    if closed is not None:  # a checkout under `mktemp -d` (0700): the runner is out of reach
        with pytest.raises(RuntimeError, match="the in-sandbox runner"):
            start_service(workers=1, work_dir=work / "w", extra_args=unsafe)
        pytest.skip(
            f"{closed} has no o+x, so none mode refuses this install (checked above); running "
            "tasks without isolation needs a checkout every uid can read"
        )
    with (
        start_service(workers=1, work_dir=work / "w", extra_args=unsafe) as svc,
        svc.client() as c,
    ):
        iso = c.health()["isolation"]
        assert iso["mode"] == "none"
        assert any("NO ISOLATION" in w for w in iso["warnings"])
        assert "NO ISOLATION" in svc.log()
        assert c.run_task(calc_task()).verdict == Verdict.passed
        assert c.run_task(calc_task(patch="")).verdict == Verdict.failed
        r = httpx.get(f"{svc.url}/healthz", params={"detail": 1}, timeout=10).json()
        assert r["isolation"]["mode"] == "none"
    shutil.rmtree(work, ignore_errors=True)
