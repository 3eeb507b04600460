"""Run by test_moe.py in a fresh process with 4 fake CPU devices (XLA_FLAGS must be set before
jax is imported). Trains the same tiny Qwen3-MoE on one device, on a 4-device fsdp mesh with the
experts split by expert (XLA gathers them: FSDP) and with expert parallelism (each device runs
its own 2 of the 8 experts: the all-gather dispatch), then a tiny Qwen3-Next (Gated DeltaNet,
gated attention, experts with the shared expert) on one device and on a 2×2 (fsdp, tensor)
mesh, and prints what the test compares as one JSON line.

Usage: python _expert_parallel.py QWEN3_MOE_DIR QWEN3_NEXT_DIR
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from dockyard.core.rl import PolicyLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax.models.hf import apply
from dockyard.jax.sharding import make_mesh
from dockyard.torch.testing import random_batch

BALANCING = {"router_bias_update_rate": 0.05, "router_load_balancing_type": "aux_loss",
             "aux_loss_coeff": 0.1, "expert_capacity_factor": 1.0}  # fmt: skip


def main(model_dir: str, next_dir: str) -> None:
    devices = jax.devices()
    cfg = {"model_name": model_dir, "precision": "float32", "train_micro_batch_size": 4,
           "logprob_batch_size": 4, "reference_policy": False, "optimizer": {"lr": 1e-3}}  # fmt: skip
    workers = {
        "single": JaxPolicyWorker({**cfg, "moe": BALANCING}, mesh=make_mesh(1, 1, devices[:1])),
        "fsdp": JaxPolicyWorker({**cfg, "moe": BALANCING}, mesh=make_mesh(4, 1, devices)),
        "ep": JaxPolicyWorker(
            {**cfg, "moe": {**BALANCING, "expert_parallel_size": 4}}, mesh=make_mesh(4, 1, devices)
        ),
    }
    ep = workers["ep"]
    gate = ep.params["model"]["layers"][0]["mlp"]["experts"]["gate_proj"]
    out: dict = {
        "num_devices": len(devices),
        "ep_mesh": ep.router is not None and ep.router.mesh is not None,
        "experts_shape": list(gate.shape),
        "experts_shard_shape": list(gate.addressable_shards[0].data.shape),
        "steps": [],
    }
    probe = random_batch(6, 24, seed=7)
    for seed in (4, 5):
        batch = random_batch(8, 24, seed=seed)
        m = {name: w.train_step(batch, PolicyLoss()) for name, w in workers.items()}
        keys = ["loss", "grad_norm", *sorted(k for k in m["single"] if k.startswith("moe/"))]
        out["steps"].append({k: [m[n][k] for n in workers] for k in keys})
    lp = {name: w.get_logprobs(probe) for name, w in workers.items()}
    out["logprob_diff"] = {n: float(np.abs(lp[n] - lp["single"]).max()) for n in ("fsdp", "ep")}
    # Tokens not divisible by the axis (15 here): replicated over it, partial outputs summed.
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(3, 1000, (3, 5)), jnp.int32)
    one, many = workers["single"], ep
    want = apply(one.graphdef, one.params, ids, router=one.router, bias=one.router_bias)
    got = apply(many.graphdef, many.params, ids, router=many.router, bias=many.router_bias)
    # Expert parallelism moves tokens, never expert weights: no all-gather yields [E, ...].
    ids4, mask4 = ep._micro(probe, np.arange(4), 32)
    hlo = ep._logprob_fn.lower(ep.params, ids4, mask4, ep.router_bias).compile().as_text()
    gathered = [line.split("=", 1)[1].split()[0] for line in hlo.splitlines()
                if " all-gather(" in line]  # fmt: skip
    full = "f32[" + ",".join(map(str, gate.shape)) + "]"
    out["expert_weight_gathers"] = sum(g.startswith(full) for g in gathered)
    out["token_gathers"] = sum(g.startswith(f"f32[{4 * 32},") for g in gathered)
    out["odd_tokens_diff"] = float(np.abs(np.asarray(got) - np.asarray(want)).max())
    out["next"] = _next_on_a_grid(next_dir, devices)
    print("RESULT " + json.dumps(out))


def _next_on_a_grid(path: str, devices: list) -> dict:
    """Qwen3-Next with every balancing option, one device vs 2×2: per step (loss, grad norm,
    aux loss, drops) of each, and the logprob difference after two steps."""
    cfg = {"model_name": path, "precision": "float32", "train_micro_batch_size": 4,
           "logprob_batch_size": 4, "reference_policy": False, "optimizer": {"lr": 1e-3},
           "moe": BALANCING}  # fmt: skip
    one = JaxPolicyWorker(cfg, mesh=make_mesh(1, 1, devices[:1]))
    grid = JaxPolicyWorker(cfg, mesh=make_mesh(2, 2, devices))
    keys = ("loss", "grad_norm", "moe/aux_loss", "moe/dropped_tokens", "moe/load_imbalance")
    steps = []
    for seed in (4, 5):
        batch = random_batch(8, 24, seed=seed)
        m1, m4 = one.train_step(batch, PolicyLoss()), grid.train_step(batch, PolicyLoss())
        steps.append({k: [m1[k], m4[k]] for k in keys})
    probe = random_batch(6, 24, seed=7)
    diff = float(np.abs(one.get_logprobs(probe) - grid.get_logprobs(probe)).max())
    return {"steps": steps, "logprob_diff": diff}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
