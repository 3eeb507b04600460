"""The bwrap launch gate: a jail runs nothing before it is in its cgroups with its rlimits.

Real bubblewrap and real cgroups (``jail.run`` directly, no service): the jail's first process
waits on ``--block-fd`` while the service confines it; a failed confinement kills it unreleased.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from dockyard.sandbox import cgroups, jail, zygote
from dockyard.sandbox.models import Limits
from dockyard.sandbox.toolchain import python_executable, runner_argv

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(scope="module")
def probe() -> cgroups.Probe:
    p = cgroups.probe()
    if not {"pids", "memory"} <= set(p.controllers):
        pytest.skip(f"needs writable pids and memory cgroups (root): {p.warning}")
    return p


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(tmp_path, 0o755)
    if os.geteuid() == 0:
        os.chown(ws, 200_001, 200_001)
    return ws


def _spec(ws: Path, argv: list[str], name: str, **limits: int) -> jail.JailSpec:
    return jail.JailSpec(
        argv=argv,
        workspace=ws,
        uid=200_001,
        limits=Limits(memory_mb=256, pids=32, **limits),
        timeout_s=30,
        name=name,
    )


def test_jail_is_confined_before_its_command_runs(probe: cgroups.Probe, workspace: Path) -> None:
    """The command's very first look at itself already shows the task's cgroups and rlimits."""
    name = f"gate-{os.getpid()}"
    o = jail.run(
        _spec(
            workspace, ["/bin/sh", "-c", "cat /proc/self/cgroup; ulimit -n"], name, open_files=77
        ),
        probe,
    )
    assert o.exit_code == 0, o.stderr
    *rows, nofile = o.stdout.split()
    assert nofile == "77"  # RLIMIT_NOFILE set on the blocked process, inherited
    paths = {}
    for row in rows:  # hierarchy-id:controllers:path
        _, ctrls, path = row.split(":", 2)
        for c in ctrls.split(",") or [""]:
            paths[c] = path
    for ctrl, c in probe.controllers.items():
        key = ctrl if c.version == "cgroup" else ""
        assert paths[key].endswith("/" + name), (ctrl, paths)


def test_failed_confinement_kills_the_jail_unreleased(
    probe: cgroups.Probe, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the jail cannot join its cgroups, it is killed before it runs a single instruction of
    the task (a closed block fd would otherwise release it)."""
    missing = workspace.parent / "no-such-cgroup" / "cgroup.procs"
    monkeypatch.setattr(cgroups.TaskCgroups, "procs_files", property(lambda self: [missing]))
    with pytest.raises(jail.GateError, match="confining the jail failed"):
        jail.run(_spec(workspace, ["/bin/sh", "-c", "touch /workspace/ran"], "gate-fail"), probe)
    assert not (workspace / "ran").exists()


def test_cpu_time_is_the_tasks_not_the_launchers(probe: cgroups.Probe, workspace: Path) -> None:
    """bwrap's monitor does not reap the jail's init, so its rusage misses the task: the
    reported CPU comes from the task's cgroup."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    o = jail.run(_spec(workspace, [python_executable(), "-I", "-S", "-c", burn], "gate-cpu"), probe)
    assert o.exit_code == 0, o.stderr
    assert o.cpu_s is not None
    assert o.cpu_s >= 0.25, o.cpu_s


def _runner_spec(ws: Path, name: str, z: zygote.Zygote | None, timeout_s: float) -> jail.JailSpec:
    """A runner command, as the executor builds one for a test phase."""
    return jail.JailSpec(
        argv=[*runner_argv(), "plain", "{REPORT_FD}", "t.py::test_x"],
        workspace=ws,
        uid=200_001,
        limits=Limits(),
        timeout_s=timeout_s,
        report=True,
        name=name,
        zygote=z,
    )


class _SilentZygote(zygote.Zygote):
    """Takes the hand-over and never starts the task (a hung zygote, for the code around it)."""

    def spawn(self, request: dict, fds: list[int]) -> None:
        self.held = os.dup(fds[0])  # keeps the task's status socket open, says nothing


def test_a_zygote_that_never_starts_the_task_is_an_infra_fault(
    probe: cgroups.Probe, workspace: Path
) -> None:
    """Not a timeout verdict (the task's fault): an error the executor reports as infra_error."""
    spec = _runner_spec(workspace, "gate-silent", _SilentZygote(), timeout_s=2)
    t0 = time.monotonic()
    with pytest.raises(jail.GateError, match="no task process"):
        jail.run(spec, probe)
    assert time.monotonic() - t0 < 10
    os.close(spec.zygote.held)  # type: ignore[union-attr]


class _DyingZygote(zygote.Zygote):
    """Takes the hand-over and drops it (a keeper that died before forking the task)."""

    def spawn(self, request: dict, fds: list[int]) -> None:
        pass


def test_a_keeper_dying_before_the_task_is_an_infra_fault(
    probe: cgroups.Probe, workspace: Path
) -> None:
    spec = _runner_spec(workspace, "gate-dying", _DyingZygote(), timeout_s=20)
    with pytest.raises(jail.GateError, match="keeper died before starting"):
        jail.run(spec, probe)


def test_bwrap_failing_before_the_jail_is_reported_as_its_exit_and_stderr(
    probe: cgroups.Probe, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both launch paths: bwrap's own error reaches the task's stderr, with its exit code."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: cannot mount: boom' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(jail, "BWRAP", str(fake))
    for z in (None, _SilentZygote()):
        o = jail.run(_runner_spec(workspace, "gate-nobwrap", z, timeout_s=10), probe)
        assert o.exit_code == 1, o
        assert "boom" in o.stderr, o.stderr
