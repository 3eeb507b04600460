"""Run by test_sharding.py in a fresh process with 4 fake CPU devices (XLA_FLAGS must be set
before jax is imported). Trains the same tiny model on one device and on a 2×2 (fsdp, tensor)
mesh, and prints what the test compares as one JSON line.

Usage: python _sharded_step.py MODEL_DIR CHECKPOINT_DIR
"""

from __future__ import annotations

import dataclasses
import json
import sys

import jax
import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.rl import PolicyLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax.sharding import make_mesh


def batch(vocab: int, B: int = 8, T: int = 24) -> Batch:
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, T + 1, B)
    lengths[0] = T
    cols = np.arange(T)[None, :]
    mask = cols < lengths[:, None]
    ids = np.where(mask, rng.integers(1, vocab, (B, T)), 0).astype(np.int64)
    loss_mask = mask & (cols >= 5)
    adv = (rng.normal(size=(B, 1)) * loss_mask).astype(np.float32)
    return Batch(ids, mask, loss_mask, adv, np.zeros((B, T), np.float32))


def main(model_dir: str, ckpt_dir: str) -> None:
    devices = jax.devices()
    cfg = {"model_name": model_dir, "train_micro_batch_size": 4, "logprob_batch_size": 8,
           "optimizer": {"lr": 1e-3, "weight_decay": 0.01},
           "scheduler": {"name": "cosine", "warmup_steps": 1, "total_steps": 3}}  # fmt: skip
    single = JaxPolicyWorker(cfg, mesh=make_mesh(1, 1, devices=devices[:1]))
    sharded = JaxPolicyWorker(cfg, mesh=make_mesh(2, 2, devices=devices))
    q = sharded.params["model"]["layers"][0]["self_attn"]["q_proj"]["kernel"]
    b = batch(single.model_cfg.vocab_size)
    lp = single.get_logprobs(b)
    noise = np.random.default_rng(1).normal(0, 0.05, lp.shape).astype(np.float32)
    b = dataclasses.replace(
        b, gen_logprobs=(lp + noise) * b.loss_mask, ref_logprobs=single.get_reference_logprobs(b)
    )
    loss = PolicyLoss("clipped_pg", {"kl_beta": 0.05, "agg": "token-mean"})
    out: dict = {
        "num_devices": len(devices),
        "q_proj_spec": [str(s) for s in q.sharding.spec],
        "q_proj_shard_shape": list(q.addressable_shards[0].data.shape),
        "q_proj_shape": list(q.shape),
        "logprob_diff": float(np.abs(sharded.get_logprobs(b) - lp).max()),
        "steps": [],
    }
    for _ in range(2):
        m1, m4 = single.train_step(b, loss), sharded.train_step(b, loss)
        out["steps"].append({k: (m1[k], m4[k]) for k in ("loss", "grad_norm", "lr")})
    w1, w4 = dict(single.iter_weights()), dict(sharded.iter_weights())
    w0 = dict(JaxPolicyWorker(cfg, mesh=make_mesh(1, 1, devices=devices[:1])).iter_weights())
    out["weight_diff"] = max(float(np.abs(w1[k] - w4[k]).max()) for k in w1)
    out["weight_moved"] = max(float(np.abs(w1[k] - w0[k]).max()) for k in w1)
    # Resharding-safe checkpoints: saved on the 2×2 mesh, restored on one device.
    sharded.save_checkpoint(ckpt_dir, extra_state={"note": "2x2"})
    restored = JaxPolicyWorker(cfg, mesh=make_mesh(1, 1, devices=devices[:1]))
    out["restored_extra"] = restored.load_checkpoint(ckpt_dir)
    out["restored_step"] = restored.step
    wr = dict(restored.iter_weights())
    out["restore_diff"] = max(float(np.abs(wr[k] - w4[k]).max()) for k in w4)
    m_next = (sharded.train_step(b, loss), restored.train_step(b, loss))
    out["after_restore_loss"] = [m_next[0]["loss"], m_next[1]["loss"]]
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
