"""Clean shutdown and restart: a SIGTERMed service leaves no mount, cgroup or work dir behind; the
next start on a SIGKILLed service's work dir reclaims what it left; a second live service on a
work dir in use is refused. Real services (``start_service``), real mounts, real cgroups."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.lifecycle import LOCK_NAME, STATE_NAME, WorkDir
from dockyard.sandbox.models import SessionCreate, Task, TaskState, Verdict
from dockyard.sandbox.testing import CALC_REPO, calc_task, make_tarball

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts and cgroups need root"),
]


def _unescape(field: str) -> str:
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(esc, ch)
    return field


def _proc_mounts() -> list[tuple[str, str, str]]:
    """(fstype, mount point, options) of every mount this process sees."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            out.append((parts[2], _unescape(parts[1]), parts[3]))
    return out


def mounts_under(path: Path) -> list[str]:
    root = os.path.realpath(path)
    return [m for _, m, _ in _proc_mounts() if m == root or m.startswith(root + "/")]


def svc_dirs(pid: int) -> list[Path]:
    """Every ``…/dockyard-sandbox/svc-<pid>`` cgroup folder under any cgroup controller."""
    found = []
    for fstype, mnt, _ in _proc_mounts():
        if fstype not in ("cgroup", "cgroup2"):
            continue
        for dirpath, dirnames, _ in os.walk(mnt):
            if os.path.basename(dirpath) == "dockyard-sandbox":
                found += [Path(dirpath, d) for d in dirnames if d == f"svc-{pid}"]
                dirnames.clear()  # task cgroups below are not service folders
    return found


def pids_top() -> Path:
    """This process's ``dockyard-sandbox`` folder in the v1 pids hierarchy (skip without one)."""
    mnt = next((m for t, m, o in _proc_mounts() if t == "cgroup" and "pids" in o.split(",")), None)
    if mnt is None:
        pytest.skip("needs the cgroup v1 pids controller")
    own = next(
        line.split(":", 2)[2]
        for line in Path("/proc/self/cgroup").read_text().splitlines()
        if "pids" in line.split(":")[1].split(",")
    )
    return Path(mnt) / own.lstrip("/") / "dockyard-sandbox"


def wait_in_jail(client: SandboxClient, task_id: str, work: Path, timeout: float = 60.0) -> None:
    """Until the task runs in its jail: its workspace is mounted and its cgroups are made."""
    ws = os.path.realpath(work / "ws") + "/"
    deadline = time.monotonic() + timeout
    while not (
        client.get(task_id).state == TaskState.running
        and any(m.startswith(ws) and "/s-" not in m for m in mounts_under(work))
        and _task_cgroups(work)
    ):
        assert time.monotonic() < deadline, "the task never got into its jail"
        time.sleep(0.05)


def _task_cgroups(work: Path) -> list[Path]:
    """The task cgroups in the service's cgroup folders (as its state file names them)."""
    state = json.loads((work / STATE_NAME).read_text())
    return [c for d in state["cgroups"] for c in Path(d).iterdir() if c.is_dir()]


@pytest.fixture
def services() -> Iterator[list[ServiceHandle]]:
    """Handles to stop (reclaiming what a killed one left) whatever the test's outcome."""
    started: list[ServiceHandle] = []
    yield started
    for h in reversed(started):
        h.stop(timeout=60)


def sigterm(svc: ServiceHandle, timeout: float = 120.0) -> int:
    """SIGTERM the service and wait: what it cleans up is its own doing (``stop()`` would
    also reclaim a dead service's leftovers, hiding a shutdown that cleaned up nothing)."""
    svc.proc.send_signal(signal.SIGTERM)
    return svc.proc.wait(timeout)


@pytest.mark.parametrize("kind", ["existing-work-dir", "new-work-dir-own-cache-dir"])
def test_sigterm_removes_mounts_cgroups_and_work_dir(
    tmp_path: Path, services: list[ServiceHandle], kind: str
) -> None:
    work = tmp_path / "work"
    cache = tmp_path / "persistent-cache"
    if kind == "existing-work-dir":  # the operator's dir: emptied of what the service made, kept
        work.mkdir()
        (work / "operator-notes.txt").write_text("mine\n")
        svc = start_service(work_dir=work, workers=2, extra_args=["--drain-timeout", "2"])
    else:  # a path that did not exist: the service made it, and removes it
        cache.mkdir()
        svc = start_service(
            work_dir=work, cache_dir=cache, workers=2, extra_args=["--drain-timeout", "2"]
        )
    services.append(svc)
    with svc.client() as c:
        assert c.run_task(calc_task()).verdict == Verdict.passed
        sid = c.create_session(SessionCreate(repo={"tarball": make_tarball(CALC_REPO)}, ttl_s=600))
        assert c.exec(sid, "cat calc/__init__.py").stdout.startswith("def add")
        tid = c.submit(Task(test_command="sleep 60", timeout_s=120))  # outlives the drain
        wait_in_jail(c, tid, work)
        # what there is to clean up: tmpfs mounts, cgroup folders (one with a task), a cache entry
        mounted = mounts_under(work)
        assert os.path.realpath(work / "trusted") in mounted
        assert any(m.startswith(os.path.realpath(work / "ws") + "/s-") for m in mounted)
        assert len(mounted) >= 3  # trusted, the session's workspace, the running task's
        cg = svc_dirs(svc.pid)
        assert len(cg) >= 2, cg  # pids and memory (and cpuacct) here
        assert all(any(p.is_dir() for p in d.iterdir()) for d in cg), "the task's cgroups"
        state = json.loads((work / STATE_NAME).read_text())
        assert state["pid"] == svc.pid
        assert sorted(state["cgroups"]) == sorted(map(str, cg))
        cache_root = work / "cache" if kind == "existing-work-dir" else cache
        entries = [p.name for p in cache_root.iterdir() if not p.name.startswith(".tmp-")]
        assert entries, "a cache entry"
    if kind != "existing-work-dir":  # a temp dir an interrupted materialisation of ours left
        (cache / f".tmp-{'a' * 32}-{svc.pid}-1" / "tree").mkdir(parents=True)
    rc = sigterm(svc)
    assert rc in (0, -signal.SIGTERM), svc.log()[-3000:]
    log = svc.log()
    assert "clean-up" not in log, log[-3000:]
    assert "shutdown:" not in log, log[-3000:]
    assert mounts_under(work) == []
    assert mounts_under(tmp_path) == []
    assert svc_dirs(svc.pid) == []
    if kind == "existing-work-dir":
        assert work.is_dir()
        assert sorted(os.listdir(work)) == ["operator-notes.txt"]
        assert (work / "operator-notes.txt").read_text() == "mine\n"
    else:
        assert not work.exists()
        assert sorted(p.name for p in cache.iterdir()) == sorted(entries)  # kept, no .tmp-*
        assert all((cache / e / "tree").is_dir() for e in entries)


LAUNCHER = r"""
import sys, time
from dockyard.sandbox.launch import start_service
from dockyard.sandbox.models import SessionCreate
svc = start_service(work_dir=sys.argv[1], workers=2, extra_args=["--drain-timeout", "2"])
with svc.client() as c:
    c.create_session(SessionCreate(ttl_s=600))
print(svc.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_service_goes_when_its_launcher_dies(tmp_path: Path, sig: signal.Signals) -> None:
    """start_service in a process that dies without its ``with`` block's exit (a SIGKILL, or a
    SIGTERM that Python does not turn into an exception): the service sees its stdin pipe close,
    drains as on SIGTERM and removes its work dir (was: it lived on, as root, a session open)."""
    work = tmp_path / "work"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(work)], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    pid = int(launcher.stdout.readline())
    assert mounts_under(work), "the session's workspace"
    launcher.send_signal(sig)
    launcher.wait(30)
    launcher.stdout.close()
    deadline = time.monotonic() + 60
    try:
        while _alive(pid):
            assert time.monotonic() < deadline, "the service outlived its launcher"
            time.sleep(0.1)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    assert mounts_under(work) == []
    assert svc_dirs(pid) == []
    assert not work.exists()


def test_next_start_reclaims_what_a_killed_service_left(
    tmp_path: Path, services: list[ServiceHandle]
) -> None:
    work = tmp_path / "work"
    a = start_service(work_dir=work, workers=2)
    services.append(a)
    with a.client() as c:
        sid = c.create_session(SessionCreate(repo={"tarball": make_tarball(CALC_REPO)}, ttl_s=600))
        assert c.exec(sid, "true").exit_code == 0
        tid = c.submit(Task(test_command="sleep 60", timeout_s=120))
        wait_in_jail(c, tid, work)
    a.kill()
    assert a.proc.returncode == -signal.SIGKILL
    # what it left: its mounts, its cgroup folders with the task's in them, state and lock
    left = mounts_under(work)
    assert os.path.realpath(work / "trusted") in left
    assert any(m.startswith(os.path.realpath(work / "ws") + "/s-") for m in left), left
    a_cg = svc_dirs(a.pid)
    assert len(a_cg) >= 2, a_cg
    assert any(any(p.is_dir() for p in d.iterdir()) for d in a_cg), "the task's cgroup folders"
    assert (work / LOCK_NAME).exists()
    assert (work / STATE_NAME).exists()
    # a process that outlived the service in one of its cgroups (--die-with-parent normally
    # sees to that), and a cache temp dir of an interrupted materialisation
    stray_cg = next(d for d in a_cg if (d / "pids.max").exists()) / "stray"
    stray_cg.mkdir()
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        (stray_cg / "cgroup.procs").write_text(str(sleeper.pid))
        tmp_entry = work / "cache" / f".tmp-{'b' * 32}-{a.pid}-7"
        (tmp_entry / "tree").mkdir(parents=True)

        b = start_service(work_dir=work, workers=2)
        services.append(b)
        assert sleeper.wait(timeout=30) == -signal.SIGKILL
        assert svc_dirs(a.pid) == []
        assert not tmp_entry.exists()
        assert mounts_under(work) == [os.path.realpath(work / "trusted")]  # b's own, one layer
        assert sorted(os.listdir(work / "ws")) == []
        assert json.loads((work / STATE_NAME).read_text())["pid"] == b.pid
        with b.client() as c:
            assert c.run_task(calc_task()).verdict == Verdict.passed
        assert f"reclaimed what a previous service (pid {a.pid})" in b.log()
        assert sigterm(b) in (0, -signal.SIGTERM)
        assert not work.exists()  # a dir the dead service created is removed by its successor
        assert svc_dirs(b.pid) == []
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_recorded_cgroups_are_reclaimed_even_when_the_pid_lives(
    tmp_path: Path, services: list[ServiceHandle]
) -> None:
    """The state file, not the pid, finds a dead service's cgroups: here it names a pid that is
    alive (this test's own, as if reused) and a folder ``svc-1`` (pid 1 lives, so no
    dead-pid sweep would touch it); the lock is free, so both are stale."""
    top = pids_top()
    top.mkdir(exist_ok=True)
    stale = top / "svc-1"
    if stale.exists():
        pytest.skip(f"{stale} exists: a service runs as pid 1 here")
    work = tmp_path / "work"
    work.mkdir()
    (stale / "task-x").mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        (stale / "task-x" / "cgroup.procs").write_text(str(sleeper.pid))
        WorkDir(work, work / "cache", own_cache=True, created=False).record_cgroups([stale])
        assert json.loads((work / STATE_NAME).read_text())["pid"] == os.getpid()
        svc = start_service(work_dir=work, workers=1)
        services.append(svc)
        assert sleeper.wait(timeout=30) == -signal.SIGKILL
        assert not stale.exists()
        with svc.client() as c:
            assert c.run_task(Task(test_command="echo ok")).stdout == "ok\n"
        assert sigterm(svc) in (0, -signal.SIGTERM)
        assert sorted(os.listdir(work)) == []
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        if stale.exists():
            from dockyard.sandbox.cgroups import remove_tree

            remove_tree(stale)


def test_a_second_service_on_a_work_dir_in_use_is_refused(
    tmp_path: Path, services: list[ServiceHandle]
) -> None:
    work = tmp_path / "work"
    a = start_service(work_dir=work, workers=1)
    services.append(a)
    with a.client() as c:
        sid = c.create_session(SessionCreate(repo={"tarball": make_tarball(CALC_REPO)}, ttl_s=600))
        before = mounts_under(work)
        with pytest.raises(RuntimeError) as refused:
            services.append(start_service(work_dir=work, workers=1))
        msg = str(refused.value)
        assert f"--work-dir {work} is in use by another live dockyard-sandbox service" in msg
        assert f"(pid {a.pid})" in msg
        # the refused start reclaimed nothing of the live service's
        assert mounts_under(work) == before
        assert c.exec(sid, "cat calc/__init__.py").stdout.startswith("def add")
        assert c.run_task(calc_task()).verdict == Verdict.passed
    assert json.loads((work / STATE_NAME).read_text())["pid"] == a.pid
