"""freezer.py against real cgroups: a process that counts stops counting while frozen, in the
host's own way (cgroup v2 freeze or the v1 freezer) and with the SIGSTOP fallback, and counts
again after the thaw; its children (forked before or during the freeze) are held too."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.sandbox import freezer
from dockyard.sandbox.cgroups import Probe, TaskCgroups, probe

COUNTER = r"""
import os, sys, time
path = sys.argv[1]
if os.fork() == 0:  # a child counts too, in its own file
    path += ".child"
n = 0
while True:
    n += 1
    with open(path + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(path + ".tmp", path)
    time.sleep(0.005)
"""


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[tuple[Probe, str, list[Path]]]:
    p = probe()
    if "pids" not in p.controllers:
        pytest.skip("no writable pids cgroup here (the rlimit fallback: nothing to freeze)")
    name = f"freeze-test-{os.getpid()}"
    cg = TaskCgroups.create(p, name, 256 << 20, 64)
    out = tmp_path / "n"
    proc = subprocess.Popen([sys.executable, "-c", COUNTER, str(out)])
    for f in cg.procs_files:
        f.write_text(str(proc.pid))
    files = [out, Path(f"{out}.child")]
    # the child forked before the move: move it too (as a jail's tree is born inside its cgroup)
    deadline = time.monotonic() + 10
    while not all(f.exists() for f in files) and time.monotonic() < deadline:
        time.sleep(0.01)
    for child in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                text=True).stdout.split():  # fmt: skip
        for f in cg.procs_files:
            f.write_text(child)
    try:
        yield p, name, files
    finally:
        cg.remove()
        proc.wait()


def _counts(files: list[Path]) -> list[int]:
    return [int(f.read_text() or 0) for f in files]


def _still_for(files: list[Path], seconds: float) -> bool:
    before = _counts(files)
    time.sleep(seconds)
    return _counts(files) == before


@pytest.mark.parametrize("how", ["host", "sigstop"])
def test_frozen_processes_stop_and_resume(counting, how: str, monkeypatch) -> None:
    p, name, files = counting
    if how == "sigstop":  # as on a host with neither cgroup v2 nor the v1 freezer
        monkeypatch.setattr(freezer, "_V1_FREEZER", Path("/nonexistent"))
        p = Probe({n: c for n, c in p.controllers.items() if c.version != "cgroup2"})
    assert not _still_for(files, 0.3)  # counting
    with freezer.frozen(p, name) as held:
        assert held
        time.sleep(0.05)  # a write in flight lands
        assert _still_for(files, 0.4), "still counting while frozen"
    time.sleep(0.05)
    assert not _still_for(files, 0.3), "not counting after the thaw"


def test_nothing_to_freeze_is_said(tmp_path: Path) -> None:
    with freezer.frozen(probe(), "no-such-jail") as held:
        assert held is False
