"""Run a library's pytest suite in a local subprocess and read per-test outcomes.

Used only to *build* tasks (on a trusted, pristine or freshly mutated tree). Outcomes come from
a tiny plugin writing ``{nodeid: [outcome, message]}`` to a JSON file, not from stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_PLUGIN = """
import json, os
_OUT = {}

def pytest_runtest_logreport(report):
    prev = _OUT.get(report.nodeid)
    if report.when == "call" or report.outcome != "passed":
        if prev is not None and prev[0] in ("failed", "error"):
            return
        outcome = report.outcome
        if report.when != "call" and report.outcome == "failed":
            outcome = "error"
        msg = ""
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            msg = crash.message
        elif report.longrepr is not None and outcome != "passed":
            msg = str(report.longrepr)[-2000:]
        _OUT[report.nodeid] = [outcome, msg]

def pytest_collectreport(report):
    if report.failed:
        _OUT["<collection>::" + report.nodeid] = ["error", str(report.longrepr)[-2000:]]

def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["DOCKYARD_OUTCOMES"], "w") as f:
        json.dump(_OUT, f)
"""


class RunFailed(RuntimeError):
    """The test run did not complete (timeout, crash before writing outcomes)."""


def run_pytest(
    root: Path,
    node_ids: list[str] | None = None,
    timeout_s: float = 120.0,
    paths: list[str] | None = None,
) -> dict[str, tuple[str, str]]:
    """Run pytest in ``root``; returns ``{nodeid: (outcome, crash message)}``.

    ``outcome`` ∈ passed | failed | skipped | error; collection errors appear under
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
            "-c", os.devnull, "--rootdir", str(root), "-o", "addopts=", "--tb=no", "-W", "ignore",
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
    return {k: (v[0], v[1]) for k, v in data.items()}
