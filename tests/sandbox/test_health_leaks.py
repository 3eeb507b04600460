"""Issue 34, item 4: what a caller without the token, or a task in its jail, learns of the host.

Against a real service with a token (real bwrap): ``/healthz`` without the token says only
``status`` and ``version``; the detailed view (``?detail=1``) needs the token and is where the
host cgroup paths are; ``/metrics`` carries no host path even for the operator. In a session's
jail (``exec``), in its terminal (``tty``), in a one-shot task's shell and in a test run by the
zygote-forked runner, ``/proc/*/cmdline`` (pid 1 is a fork of bwrap: its options used to be
its command line, the workspace's host path among them), ``/proc/*/environ`` and
``/proc/self/mountinfo`` show no path of the service's work dir nor of its ``--repo-root``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import Task, Verdict

# Everything a process in the jail can read of /proc, pid 1 (bwrap) and the rest, NUL → space.
READ_PROC = (
    "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ /proc/self/mountinfo; do "
    "echo \"== $f\"; tr '\\0' ' ' < $f 2>/dev/null; echo; done"
)


@pytest.fixture(scope="module")
def svc(repo_root: Path) -> Iterator[ServiceHandle]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    with start_service(workers=1, generate_token=True, repo_roots=[repo_root]) as s:
        yield s


@pytest.fixture(scope="module")
def client(svc: ServiceHandle) -> Iterator[SandboxClient]:
    with svc.client() as c:
        yield c


def _host_paths(svc: ServiceHandle, repo_root: Path, detail: dict) -> list[str]:
    """The service's host paths a leak would show: work dir, its temp parent, repo root, the
    cgroup folders (from the detailed health, which must name them: else nothing is tested)."""
    cgroups = [v.split(":", 1)[1] for v in detail["isolation"]["cgroups"].values()]
    assert cgroups, detail
    assert all(c.startswith("/sys/fs/cgroup/") for c in cgroups), detail
    work = [str(svc.work_dir), os.path.realpath(svc.work_dir), str(svc.work_dir.parent)]
    return [*work, str(repo_root), *cgroups, "/sys/fs/cgroup"]


def _leaks(text: str, needles: list[str]) -> list[str]:
    return [n for n in needles if n in text]


def test_health_and_metrics_show_no_host_path_without_the_token(
    svc: ServiceHandle, client: SandboxClient, repo_root: Path
) -> None:
    detail = client.health()  # with the token: the operator's view names the cgroup folders
    assert detail["session_calls"]["long"]["threads"] >= 1
    needles = _host_paths(svc, repo_root, detail)
    assert _leaks(str(detail), needles), "the detailed view should show the cgroup paths"

    plain = httpx.get(f"{svc.url}/healthz", timeout=30)
    assert plain.status_code == 200
    assert plain.json() == {"status": "ok", "version": detail["version"]}
    assert _leaks(plain.text, needles) == []
    for q in ("?detail=1", "?detail=true"):
        r = httpx.get(f"{svc.url}/healthz{q}", timeout=30)
        assert r.status_code == 401, r.text
        assert _leaks(r.text, needles) == []
    wrong = {"authorization": "Bearer wrong"}
    assert httpx.get(f"{svc.url}/healthz?detail=1", headers=wrong, timeout=30).status_code == 401

    r = httpx.get(f"{svc.url}/metrics", timeout=30)
    assert r.status_code == 401
    assert _leaks(r.text, needles) == []
    text = client.metrics()  # even the operator's scrape carries no host path
    assert 'dockyard_sandbox_session_call_threads{lane="long"}' in text
    assert _leaks(text, needles) == []


def test_a_task_reads_no_host_path_of_the_service_from_proc(
    svc: ServiceHandle, client: SandboxClient, repo_root: Path
) -> None:
    detail = client.health()
    needles = _host_paths(svc, repo_root, detail)
    sid = client.create_session({"ttl_s": 120})
    try:
        # a session's exec jail
        out = client.exec(sid, READ_PROC, timeout_s=30).stdout
        assert "== /proc/1/cmdline\nbwrap " in out, out[:2000]  # pid 1 (bwrap) was read
        assert "/proc/self/mountinfo" in out
        assert " /workspace " in out
        if not detail["isolation"]["workspace_tmpfs"]:  # a bind of the host dir: mountinfo
            out = out.split("== /proc/self/mountinfo")[0]  # names it (docs/sandbox.md)
        assert _leaks(out, needles) == [], out[:4000]

        # its persistent terminal (a long-lived jail with tmux in it)
        client.tty(sid, [f"({READ_PROC}) > /workspace/from-tty.txt", "<Enter>"], wait_s=0.5)
        seen = b""
        for _ in range(40):
            try:
                seen = client.get_file(sid, "from-tty.txt")
                if b"/proc/self/mountinfo" in seen:
                    break
            except Exception:  # not written yet
                pass
            time.sleep(0.25)
        text = seen.decode(errors="replace")
        assert "bwrap " in text, text[:2000]
        assert "tmux" in text, text[:2000]
        assert _leaks(text, needles) == [], text[:4000]
    finally:
        client.delete_session(sid)

    # a one-shot task's shell
    r = client.run_task(Task(test_command=READ_PROC, timeout_s=60))
    assert r.verdict == Verdict.passed, r
    assert "== /proc/1/cmdline\nbwrap " in r.stdout
    assert _leaks(r.stdout, needles) == [], r.stdout[:4000]

    # a test run by the zygote-forked runner (pid 1 is bwrap waiting at its gate)
    test = (
        f"import glob\n\nNEEDLES = {needles!r}\n\ndef test_proc():\n"
        "    blob = ''\n"
        "    for f in glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ'):\n"
        "        try:\n"
        "            blob += open(f, 'rb').read().decode(errors='replace')\n"
        "        except OSError:\n"
        "            pass\n"
        "    blob += open('/proc/self/mountinfo').read()\n"
        "    assert 'bwrap\\0' in blob\n"
        "    assert [n for n in NEEDLES if n in blob] == []\n"
    )
    r = client.run_task(
        Task(
            test_files={"test_proc.py": test},
            tests={"fail_to_pass": ["test_proc.py::test_proc"], "runner": "plain"},
            timeout_s=60,
        )
    )
    assert r.verdict == Verdict.passed, (r.verdict, r.stdout[-3000:], r.stderr[-2000:])


def test_unshare_mode_keeps_its_plan_off_the_jails_cmdline() -> None:
    """The ``unshare`` backend's pid 1 is its set-up script, whose plan names the workspace's
    host path: the plan comes in a memfd, never on that command line."""
    with (
        start_service(workers=1, extra_args=["--isolation", "unshare"]) as s,
        s.client() as c,
    ):
        needles = [str(s.work_dir), os.path.realpath(s.work_dir), str(s.work_dir.parent)]
        r = c.run_task(Task(test_command=READ_PROC, timeout_s=60))
        assert r.verdict == Verdict.passed, r
        assert "unshare_setup.py --plan-fd " in r.stdout.split("== /proc/2/")[0], r.stdout[:2000]
        assert _leaks(r.stdout, needles) == [], r.stdout[:4000]
