"""deploy/slurm/ray.sub against a real single-node Slurm: it starts a Ray head with the node's
fleet role and runs a command that joins that cluster (a tiny CPU job, not a training run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "slurm" / "ray.sub"

PROBE = r"""
import json, os, ray
ray.init(logging_level="ERROR")
nodes = [n for n in ray.nodes() if n["Alive"]]
print("PROBE " + json.dumps({
    "nodes": len(nodes),
    "labels": nodes[0].get("Labels", {}),
    "resources": nodes[0].get("Resources", {}),
    "ray_address": os.environ.get("RAY_ADDRESS"),
    "job": os.environ.get("SLURM_JOB_ID"),
    "auth": os.environ.get("RAY_AUTH_MODE"),
}))
"""


@pytest.mark.e2e
def test_ray_sub_runs_a_command_on_a_ray_cluster_with_fleet_roles(
    slurm, slurm_job, tmp_path
) -> None:
    """One job: Ray head up with role trainer, `dockyard --version` and a Ray probe run in it,
    then the command's exit status (3) becomes the job's."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    job_env = {
        "COMMAND": f"dockyard --version && python {probe} && exit 3",
        "FLEET_ROLES": "trainer",
        "RAY_START_ARGS": "--include-dashboard=false --num-cpus=1 --disable-usage-stats",
        "RAY_PORT": "6391",
        "RAY_WAIT_S": "240",
        # a loaded 2-core machine can take over a minute to start Ray's agents
        "RAY_agent_register_timeout_ms": "240000",
        "RAY_raylet_start_wait_time_s": "240",
        # the raylet waits a fixed ~60 s for the metrics agent's port file and aborts after;
        # a probe job needs no metrics
        "RAY_enable_metrics_collection": "0",
    }
    state, log = slurm_job(slurm, SCRIPT, tmp_path / "job.out", job_env, timeout=300)
    assert "ray.sub: Ray cluster up (1 node(s))" in log, f"{state}\n{log}"
    assert "dockyard " in log  # `dockyard --version` ran inside the allocation
    line = next(x for x in log.splitlines() if x.startswith("PROBE "))
    probe_out = json.loads(line.removeprefix("PROBE "))
    assert probe_out["nodes"] == 1
    assert probe_out["labels"].get("dockyard.io/fleet-role") == "trainer", probe_out
    # the custom resource dockyard.core.runtime pins the trainer fleet to, and no other fleet's
    fleet = {k: v for k, v in probe_out["resources"].items() if k.startswith("fleet:")}
    assert fleet == {"fleet:trainer": 1000.0}, probe_out
    assert probe_out["ray_address"].endswith(":6391")
    assert probe_out["job"]
    assert probe_out["auth"] == "token"  # the per-job token reached the command and it connected
    assert "command exited with status 3" in log
    assert "JobState=FAILED" in state, f"{state}\n{log}"
    assert "ExitCode=3:0" in state, f"{state}\n{log}"


def test_ray_sub_rejects_a_bad_role_list(slurm, slurm_job, tmp_path) -> None:
    job_env = {"COMMAND": "true", "FLEET_ROLES": "trainer inference"}
    state, log = slurm_job(slurm, SCRIPT, tmp_path / "job.out", job_env, timeout=60)
    assert "ExitCode=2:0" in state, f"{state}\n{log}"
    assert "FLEET_ROLES has 2 entries for 1 nodes" in log
