"""Ray workers under ``uv run`` (how ``./dev test`` and CI start pytest).

Ray's uv hook would start every worker as ``uv run ... python`` in a zipped copy of the cwd,
where ``uv run --no-sync`` makes an empty virtualenv: ``No module named 'ray'`` and "worker
startup repeatedly failed". ``init_ray`` turns the hook off; these tests hold it to that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dockyard.train.runtime import cluster

REPO = Path(__file__).resolve().parents[3]

# Imports Ray first (as pytest does when collecting), then starts Ray through init_ray.
DRIVER = """
import json, os, sys
from types import SimpleNamespace
import ray
from ray._private.runtime_env.uv_runtime_env_hook import _get_uv_run_cmdline
from dockyard.train.runtime.cluster import init_ray, shutdown_ray

@ray.remote
def where():
    return sys.executable

under_uv = _get_uv_run_cmdline() is not None
init_ray(SimpleNamespace(cpus_per_node=1))
try:
    job_env = dict(ray.get_runtime_context().runtime_env or {})
    worker = ray.get(where.remote(), timeout=240)
finally:
    shutdown_ray()
print("RESULT " + json.dumps({"under_uv": under_uv, "driver": sys.executable,
                              "worker": worker, "job_env": sorted(job_env),
                              "auth": os.environ.get("RAY_AUTH_MODE")}))
"""


def test_hook_switch_respects_an_explicit_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, cluster.UV_HOOK_ENV, True)  # Ray imported before: on
    monkeypatch.delenv(cluster.UV_HOOK_ENV, raising=False)
    assert cluster.require_ray() is ray
    assert os.environ[cluster.UV_HOOK_ENV] == "0"
    assert getattr(ray_constants, cluster.UV_HOOK_ENV) is False
    monkeypatch.setenv(cluster.UV_HOOK_ENV, "1")  # the user asked for Ray's default
    assert cluster.disable_uv_run_hook() is False
    assert getattr(ray_constants, cluster.UV_HOOK_ENV) is True


@pytest.mark.slow
def test_workers_start_in_the_driver_interpreter_under_uv_run() -> None:
    pytest.importorskip("ray")
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (./dev installs it)")
    env = {k: v for k, v in os.environ.items() if k not in (cluster.UV_HOOK_ENV, "RAY_AUTH_MODE")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run(
        [uv, "run", "--no-sync", "python", "-c", DRIVER],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert lines, proc.stdout
    res = json.loads(lines[-1].removeprefix("RESULT "))
    assert res["under_uv"], "the driver did not run under `uv run`: this test proves nothing"
    assert "py_executable" not in res["job_env"]
    assert "working_dir" not in res["job_env"]
    assert Path(res["worker"]).resolve() == Path(res["driver"]).resolve()
    # Ray's default for a new local cluster stands (token auth on), without its notice
    assert res["auth"] == "token"
    assert cluster.TOKEN_AUTH_NOTICE not in proc.stdout + proc.stderr
