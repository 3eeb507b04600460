"""Parity with the torch trainer: the same GRPO steps on the same tiny model and batch give the
same loss, grad norm and updated weights in both backends (fp32 tolerance).

Both workers get the same config keys; the loss is core's ``PolicyLoss`` (clipped PG with a k3
KL to the reference), applied to torch tensors in one and to jax arrays in the other.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss
from dockyard.jax import JaxPolicyWorker

torch_worker = pytest.importorskip("dockyard.torch.worker", reason="dockyard-torch not installed")
testing = pytest.importorskip("dockyard.torch.testing")

pytestmark = pytest.mark.slow

CONFIG = {
    "precision": "float32",
    "train_micro_batch_size": 3,
    "logprob_batch_size": 6,
    "max_grad_norm": 0.5,  # below the first step's norm: clipping is exercised
    "generation_temperature": 0.9,
    "optimizer": {"lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.99), "eps": 1e-8},
    "scheduler": {"name": "cosine", "warmup_steps": 1, "total_steps": 4, "min_lr_ratio": 0.1},
}


@pytest.mark.parametrize(
    "model", [{"family": "qwen2"}, {"family": "llama", "tie_word_embeddings": True}],
    ids=["qwen2", "llama-tied"],
)  # fmt: skip
def test_grpo_steps_match_torch(model, tmp_path) -> None:
    path = testing.build_tiny_model(tmp_path / "m", vocab_size=320, **model)
    tw = torch_worker.TorchPolicyWorker({"model_name": str(path), **CONFIG})
    jw = JaxPolicyWorker({"model_name": str(path), **CONFIG})
    batch = testing.random_batch(6, 24, vocab_size=320, seed=1)

    lp_t, lp_j = tw.get_logprobs(batch), jw.get_logprobs(batch)
    np.testing.assert_allclose(lp_j, lp_t, rtol=1e-5, atol=2e-5)
    ref = tw.get_reference_logprobs(batch)
    np.testing.assert_allclose(jw.get_reference_logprobs(batch), ref, rtol=1e-5, atol=2e-5)
    noise = np.random.default_rng(2).normal(0, 0.1, lp_t.shape).astype(np.float32)
    batch = dataclasses.replace(
        batch, gen_logprobs=(lp_t + noise) * batch.loss_mask, ref_logprobs=ref
    )
    loss = PolicyLoss("clipped_pg", {"kl_beta": 0.05, "kl_type": "k3", "eps_low": 0.2,
                                     "eps_high": 0.28, "agg": "token-mean"})  # fmt: skip
    initial = dict(jw.iter_weights())
    norms = []
    for step in range(2):
        mt, mj = tw.train_step(batch, loss), jw.train_step(batch, loss)
        assert mj["loss"] == pytest.approx(mt["loss"], rel=1e-5, abs=1e-6), step
        assert mj["grad_norm"] == pytest.approx(mt["grad_norm"], rel=1e-5), step
        assert mj["num_loss_tokens"] == mt["num_loss_tokens"]
        norms.append(mt["grad_norm"])
        for key in set(mt) & set(mj) - {"lr", "step_time_s", "tokens_per_s"}:
            assert mj[key] == pytest.approx(mt[key], rel=1e-4, abs=1e-6), key
    assert max(norms) > CONFIG["max_grad_norm"]  # clipping was exercised
    print(
        f"parity {model}: loss/grad_norm torch={mt['loss']:.7f}/{mt['grad_norm']:.7f} "
        f"jax={mj['loss']:.7f}/{mj['grad_norm']:.7f}"
    )
    torch_weights = {k: v for b in tw.export_weights(1 << 30) for k, v in b.items()}
    jax_weights = {k: v for b in jw.export_weights(1 << 30) for k, v in b.items()}
    assert set(torch_weights) == set(jax_weights)
    moved = max(float(np.abs(jax_weights[k] - initial[k]).max()) for k in initial)
    assert moved > 1e-4
    diff = max(float(np.abs(jax_weights[k] - w).max()) for k, w in torch_weights.items())
    print(f"parity {model}: max |Δw| jax vs torch {diff:.2e}, max step {moved:.2e}")
    for name, w in torch_weights.items():
        # 1% of a step of size lr: Adam's m/√v amplifies fp32 noise on near-zero gradients.
        np.testing.assert_allclose(jax_weights[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(jw.get_logprobs(batch), tw.get_logprobs(batch), atol=5e-5)
