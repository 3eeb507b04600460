"""Run a library's pytest suite in a local subprocess and read per-test outcomes.

Used only to *build* tasks (on a trusted, pristine or freshly mutated tree). Outcomes come from
a tiny plugin writing ``{nodeid: [outcome, message, statement, crash_path]}`` to a JSON file, not
from stdout: the crash message, the test's own source line the failure surfaced at (pytest's
``>`` line in the test function's frame) and the file the exception was raised in — the
evidence :mod:`~dockyard.envs.swe.builder.issue` writes the issue text from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

_PLUGIN = """
import json, os, textwrap
_OUT = {}
_CALLS = {}

def pytest_runtest_logreport(report):
    if report.when == "call":
        _CALLS[report.nodeid] = _CALLS.get(report.nodeid, 0) + 1
    prev = _OUT.get(report.nodeid)
    if report.when == "call" or report.outcome != "passed":
        if prev is not None and prev[0] in ("failed", "error"):
            return
        outcome = report.outcome
        if report.when != "call" and report.outcome == "failed":
            outcome = "error"
        msg, stmt, where = "", "", ""
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            msg, where = crash.message, str(crash.path)
        elif report.longrepr is not None and outcome != "passed":
            msg = str(report.longrepr)[-2000:]
        tb = getattr(report.longrepr, "reprtraceback", None)
        for entry in getattr(tb, "reprentries", [])[:1]:  # the test function's own frame
            lines = list(getattr(entry, "lines", []))
            start = next((i for i, ln in enumerate(lines) if ln.startswith(">")), None)
            if start is not None:  # the '>' line and the rest of its statement, up to 'E' lines
                block = [" " + lines[start][1:]]
                for ln in lines[start + 1 : start + 6]:
                    if ln.startswith(("E ", ">")) or not ln.strip():
                        break
                    if ln.strip().strip("^~"):  # not Python 3.11's position carets
                        block.append(ln)
                stmt = textwrap.dedent("\\n".join(block)).strip()
        _OUT[report.nodeid] = [outcome, msg, stmt, where]

def pytest_collectreport(report):
    if report.failed:
        _OUT["<collection>::" + report.nodeid] = ["error", str(report.longrepr)[-2000:]]

def pytest_sessionfinish(session, exitstatus):
    for nodeid, n in _CALLS.items():
        if n > 1:  # unittest subTest: one report each; the sandbox's runner refuses duplicates
            _OUT[nodeid] = ["subtests", f"{n} call reports (subTest)", "", ""]
    with open(os.environ["DOCKYARD_OUTCOMES"], "w") as f:
        json.dump(_OUT, f)
"""


class Outcome(NamedTuple):
    """One test's result. ``statement``: the test's source line where it failed ('' if none);
    ``crash_path``: the absolute path of the file the exception was raised in ('' if none)."""

    outcome: str  # passed | failed | skipped | error | subtests (several call reports)
    message: str = ""
    statement: str = ""
    crash_path: str = ""


class RunFailed(RuntimeError):
    """The test run did not complete (timeout, crash before writing outcomes)."""


def run_pytest(
    root: Path,
    node_ids: list[str] | None = None,
    timeout_s: float = 120.0,
    paths: list[str] | None = None,
) -> dict[str, Outcome]:
    """Run pytest in ``root``; returns ``{nodeid: Outcome}``.

    ``outcome`` ∈ passed | failed | skipped | error | subtests (a test that reported several
    calls, as unittest's ``subTest`` does under pytest: never a task's test, since the sandbox's
    runner refuses duplicate reports); collection errors appear under
    ``<collection>::<path>``. The library's own pytest config (addopts, plugins) is ignored.
    """
    with tempfile.TemporaryDirectory(prefix="dockyard-run-") as tmp:
        plugin = Path(tmp) / "dockyard_outcomes.py"
        plugin.write_text(_PLUGIN)
        out = Path(tmp) / "outcomes.json"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": tmp,
            "PYTHONDONTWRITEBYTECODE": "1",
            "DOCKYARD_OUTCOMES": str(out),
            "HOME": tmp,
            "LANG": "C.UTF-8",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        cmd = [
            sys.executable, "-m", "pytest", "-q", "-p", "dockyard_outcomes", "-p", "no:cacheprovider",
            "-c", os.devnull, "--rootdir", str(root), "-o", "addopts=", "--tb=long", "-W", "ignore",
            *(node_ids or paths or []),
        ]  # fmt: skip
        try:
            proc = subprocess.run(
                cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as e:
            raise RunFailed(f"tests timed out after {timeout_s} s") from e
        if not out.exists():
            raise RunFailed(
                f"pytest wrote no outcomes (exit {proc.returncode}): {proc.stderr[-2000:]}"
            )
        data = json.loads(out.read_text())
    return {k: Outcome(*v) for k, v in data.items()}
