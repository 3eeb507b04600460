"""Run one build-jail plan (``jail_main.py``) under the service's limits.

The helper runs as a child of the service (host root) in its own process group and in the
build's pids/memory cgroups (joined by ``sh`` before anything else runs, as ``jail.py``'s
unshare chain does); output is captured head+tail; at the wall clock the group and the cgroups
are killed. Returns a :class:`StepOutcome`; never raises for what the step did.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from dockyard.sandbox.capture import HeadTail
from dockyard.sandbox.cgroups import Probe, TaskCgroups

JAIL_MAIN = Path(__file__).resolve().parent / "jail_main.py"
OUTPUT_CAP = 64 << 10
SETUP_FAILED = 125
FILE_CAP = 4 << 30  # bytes: RLIMIT_FSIZE of every process of a build step


@dataclass
class StepOutcome:
    exit_code: int | None
    output: str
    timed_out: bool
    oom: bool
    pids_limit: bool
    seconds: float

    def why(self) -> str:
        """'' when the step succeeded, else what went wrong (for the build log and reports)."""
        if self.timed_out:
            return "timed out"
        if self.oom:
            return "ran out of memory"
        if self.pids_limit:
            return "hit the process limit"
        return "" if self.exit_code == 0 else f"exited {self.exit_code}"


def run_plan(plan: dict, probe: Probe, timeout_s: float, memory_mb: int, pids: int) -> StepOutcome:
    cg = (
        TaskCgroups.create(probe, f"build-{uuid.uuid4().hex[:12]}", memory_mb << 20, pids)
        if probe.controllers
        else None
    )
    join = "".join(
        f"echo $$ > {shlex.quote(str(p))} || exit 125; " for p in (cg.procs_files if cg else [])
    )
    # prlimit: no single file over FILE_CAP (a layer's disk is the store's; see the docs' limits)
    argv = ["/bin/sh", "-c", join + 'exec "$@"', "sh", "prlimit", f"--fsize={FILE_CAP}", "--core=0",
            "--", sys.executable, "-I", "-S", str(JAIL_MAIN)]  # fmt: skip
    out = HeadTail(OUTPUT_CAP)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip
    reader = threading.Thread(target=_drain, args=(proc, out), daemon=True)
    reader.start()
    timed_out = False
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(json.dumps(plan).encode())
            proc.stdin.close()
        try:
            proc.wait(timeout=max(0.1, timeout_s))
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cg is not None:
            cg.kill_all()
        proc.wait()
        reader.join(timeout=5)
    res = StepOutcome(
        exit_code=None if timed_out else proc.returncode, output=out.text(), timed_out=timed_out,
        oom=bool(cg and cg.oom_killed()), pids_limit=bool(cg and cg.pids_limit_hit()),
        seconds=time.monotonic() - t0,
    )  # fmt: skip
    if cg is not None:
        cg.remove()
    return res


def _drain(proc: subprocess.Popen[bytes], out: HeadTail) -> None:
    assert proc.stdout is not None
    while chunk := proc.stdout.read1(65536):
        out.feed(chunk)
