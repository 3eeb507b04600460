"""deploy/slurm/ray.sub against a real single-node Slurm (Debian's slurm-wlm, started per module).

* a probe job: Ray head with fleet role ``trainer`` whose dashboard agent is made to start
  slower than the raylet's hard-coded 15 s wait (the failure that aborted Ray on loaded nodes);
  the command joins the job's cluster and reads the role back; exit status is passed on; the
  job's Ray is gone afterwards;
* a real ``dockyard train`` (GRPO, 2 steps, tiny Qwen2, transformers generation, the sandbox
  service) run by the default COMMAND on the job's Ray cluster;
* a bad role list is rejected before Ray starts.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

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

# Makes Ray's dashboard agent start 20 s late: longer than the raylet waits for its port files.
SLOW_AGENT = """
import sys, time
if any(a.endswith("dashboard/agent.py") for a in sys.argv):
    time.sleep(20)
"""


def _ray_tmp(log: str) -> str:
    m = re.search(r"Ray temp dir (\S+)", log)
    assert m, log
    return m.group(1)


def _assert_job_ray_gone(ray_tmp: str) -> None:
    """No process of the job's Ray is left, and its session folder is removed."""
    left = subprocess.run(["pgrep", "-af", f"{ray_tmp}/session_"], capture_output=True, text=True)
    assert not left.stdout.strip(), left.stdout
    assert not Path(ray_tmp).exists()


def test_ray_sub_runs_a_command_on_a_ray_cluster_with_fleet_roles(
    slurm, slurm_job, tmp_path
) -> None:
    """One job: Ray head up with role trainer (despite a slow agent), `dockyard --version` and a
    Ray probe run in it, then the command's exit status (3) becomes the job's."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    slow = tmp_path / "slow_agent"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_AGENT)
    job_env = {
        "COMMAND": f"dockyard --version && python {probe} && exit 3",
        "FLEET_ROLES": "trainer",
        "NUM_CPUS": "1",
        "RAY_PORT": "26391",  # away from a default local Ray (6379, 10001, 52365, 8265)
        "RAY_WAIT_S": "600",
        "PYTHONPATH": str(slow),
    }
    state, log = slurm_job(slurm, SCRIPT, tmp_path / "job.out", job_env, timeout=600)
    assert "ray.sub: Ray cluster up (1 node(s))" in log, f"{state}\n{log}"
    assert "exited during start" not in log, log  # the slow agent did not abort the raylet
    assert "dockyard " in log  # `dockyard --version` ran inside the allocation
    line = next(x for x in log.splitlines() if x.startswith("PROBE "))
    probe_out = json.loads(line.removeprefix("PROBE "))
    assert probe_out["nodes"] == 1
    assert probe_out["labels"].get("dockyard.io/fleet-role") == "trainer", probe_out
    # the custom resource dockyard.train.runtime pins the trainer fleet to, and no other fleet's
    fleet = {k: v for k, v in probe_out["resources"].items() if k.startswith("fleet:")}
    assert fleet == {"fleet:trainer": 1000.0}, probe_out
    assert probe_out["resources"]["CPU"] == 1.0
    assert probe_out["ray_address"].endswith(":26391")
    assert probe_out["job"]
    assert probe_out["auth"] == "token"  # the per-job token reached the command and it connected
    assert "command exited with status 3" in log
    assert "JobState=FAILED" in state, f"{state}\n{log}"
    assert "ExitCode=3:0" in state, f"{state}\n{log}"
    _assert_job_ray_gone(_ray_tmp(log))


def _tiny_grpo_config(out: Path) -> Path:
    """The quickstart's task and tiny model, shrunk: 2 GRPO steps of 2 prompts x 4 samples."""
    from dockyard.train.cli.quickstart_common import build_model

    cfg = {
        "policy": {
            "model_name": str(build_model(0)),
            "max_total_sequence_length": 64,
            "train_global_batch_size": 8,
            "train_micro_batch_size": 8,
            "precision": "float32",
            "max_grad_norm": None,
            "optimizer": {"name": "adamw", "lr": 1.0e-3, "weight_decay": 0.0},
            "generation": {"backend": "transformers", "temperature": 1.0, "max_new_tokens": 8},
        },
        "loss_fn": {"type": "clipped_pg", "reference_policy_kl_penalty": 0.0},
        "grpo": {
            "num_prompts_per_step": 2,
            "num_generations_per_prompt": 4,
            "max_num_steps": 2,
            "async_grpo": {"enabled": False},
            "val_at_start": False,
            "val_period": 0,
        },
        "env": {"expression": {"type": "expression", "timeout_s": 10}},
        "data": {"dataset_name": "expression"},
        "logger": {"log_dir": str(out / "logs"), "tensorboard_enabled": False},
        "checkpointing": {"enabled": False, "checkpoint_dir": str(out / "ckpt")},
        "data_plane": {"weight_transport": {"type": "shm", "timeout_s": 120}},
    }
    path = out / "train.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_ray_sub_runs_dockyard_train_on_the_jobs_ray_cluster(slurm, slurm_job, tmp_path) -> None:
    """The default COMMAND (`dockyard train --config $CONFIG cluster.address=auto`) trains two
    GRPO steps with the trainer, the generation engine and the sandbox service as Ray actors on
    the job's cluster (one node serving every fleet)."""
    config = _tiny_grpo_config(tmp_path)
    job_env = {"CONFIG": str(config), "NUM_CPUS": "2", "RAY_PORT": "26491", "RAY_WAIT_S": "600"}
    state, log = slurm_job(slurm, SCRIPT, tmp_path / "job.out", job_env, timeout=840)
    assert "ray.sub: Ray cluster up (1 node(s))" in log, f"{state}\n{log}"
    assert "running: dockyard train --config" in log
    # the driver joined this job's Ray (the head's GCS port), it did not start its own
    assert re.search(r"Connecting to existing Ray cluster at address: \S+:26491", log), log
    assert "JobState=COMPLETED" in state, f"{state}\n{log}"
    assert "ExitCode=0:0" in state, f"{state}\n{log}"
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2], rows
    for r in rows:
        assert r["trajectories"] == 8, r  # 2 prompts x 4 samples, each scored by the sandbox
        assert "train/loss" in r, r
        assert "reward/mean" in r, r
    _assert_job_ray_gone(_ray_tmp(log))


def test_ray_sub_rejects_a_bad_role_list(slurm, slurm_job, tmp_path) -> None:
    job_env = {"COMMAND": "true", "FLEET_ROLES": "trainer inference"}
    state, log = slurm_job(slurm, SCRIPT, tmp_path / "job.out", job_env, timeout=60)
    assert "ExitCode=2:0" in state, f"{state}\n{log}"
    assert "FLEET_ROLES has 2 entries for 1 nodes" in log
