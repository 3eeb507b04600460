"""Logprobs over a grammar's allowed tokens (grammar-constrained tool calls): the torch worker
takes each constrained token's logprob over its allowed set, as the engine sampled it, on every
micro-batching; the gradient flows through the normaliser over the allowed set only."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dockyard.core.experience import AllowedTokens
from dockyard.torch.logprobs import AllowedMasks, token_logprobs
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker


def _constrained(batch, vocab: int, seed: int = 0):
    """``batch`` with random allowed sets on most loss tokens (each holding its token and
    ~5% of the vocabulary; a quarter of the sets a single forced token), shared prompts."""
    rng = np.random.default_rng(seed)
    batch.input_ids[:, :8] = batch.input_ids[0, :8]  # a group's shared prompt: trees apply
    B, T = batch.input_ids.shape
    masks, rows = [], np.full((B, T), -1, np.int32)
    for b in range(B):
        for t in np.flatnonzero(batch.loss_mask[b]):
            if rng.random() < 0.2:
                continue  # unconstrained (free text outside a call)
            tok = int(batch.input_ids[b, t])
            keep = [tok] if rng.random() < 0.25 else [tok, *rng.integers(0, vocab, vocab // 20)]
            words = np.zeros((vocab + 31) // 32, np.uint32)
            for k in keep:
                words[k // 32] |= np.uint32(1 << (k % 32))
            rows[b, t] = len(masks)
            masks.append(words.view(np.int32))
    batch.allowed = AllowedTokens(np.stack(masks), rows)
    return batch


def _masked_reference(path, batch) -> np.ndarray:
    """Per sequence, plain transformers: log softmax over the allowed logits."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    bits = np.unpackbits(batch.allowed.table.view(np.uint8), axis=1, bitorder="little")
    out = np.zeros(batch.input_ids.shape, np.float32)
    with torch.no_grad():
        for b in range(batch.input_ids.shape[0]):
            n = int(batch.attention_mask[b].sum())
            ids = torch.as_tensor(batch.input_ids[b, :n])[None]
            logits = model(ids).logits[0, :-1].double()
            for t in range(1, n):
                z = logits[t - 1]
                r = batch.allowed.rows[b, t]
                if r >= 0:
                    z = z.masked_fill(~torch.as_tensor(bits[r, : z.shape[0]]).bool(), -np.inf)
                out[b, t] = float(torch.log_softmax(z, -1)[ids[0, t]])
    return out


@pytest.fixture(scope="module")
def constrained(qwen2_path):
    batch = _constrained(random_batch(6, 24, seed=5, prompt_len=8), vocab=1024)
    return batch, _masked_reference(str(qwen2_path), batch)


@pytest.mark.parametrize(
    "variant",
    [
        {"logprob_batch_size": 1, "shared_prefix": False},
        {"logprob_batch_size": 6, "shared_prefix": True},
        {"dynamic_batching": {"enabled": True, "logprob_mb_tokens": 40}, "shared_prefix": False},
        {"sequence_packing": {"enabled": True, "logprob_mb_tokens": 70}, "shared_prefix": False},
    ],
    ids=["padded-mb1", "trees", "dynamic", "packed"],
)
def test_worker_logprobs_are_taken_over_each_tokens_allowed_set(base_config, constrained, variant):
    batch, expected = constrained
    worker = TorchPolicyWorker({**base_config, **variant, "reference_policy": False})
    got = worker.get_logprobs(batch)
    assert worker._tree == bool(variant.get("shared_prefix"))  # the layout asked for ran
    np.testing.assert_allclose(got, expected, atol=2e-5)
    free = worker.get_logprobs(dataclasses.replace(batch, allowed=None))
    on = batch.allowed.rows >= 0
    assert np.abs(got[on] - free[on]).min() > 1e-3  # every constrained token renormalised
    np.testing.assert_allclose(got[~on], free[~on], atol=2e-5)  # the rest untouched


def test_the_gradient_flows_through_the_allowed_normaliser_only() -> None:
    torch.manual_seed(0)
    V = 40
    logits = torch.randn(1, 3, V, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([[0, 7, 33]])
    allowed = [7, 8, 9, 33, 39]
    words = np.zeros((V + 31) // 32, np.uint32)
    for k in allowed:
        words[k // 32] |= np.uint32(1 << (k % 32))
    rows = np.array([[-1, 0, -1]])  # token 1 constrained, token 2 free
    masks = AllowedMasks(words.view(np.int32)[None], rows, V, "cpu")
    lp = token_logprobs(logits, ids, 1.0, masks)
    lp[0, 1].backward()
    g = logits.grad[0, 0]
    p = torch.softmax(logits.detach()[0, 0, allowed], -1)
    expected = torch.zeros(V, dtype=torch.float64)
    expected[allowed] = -p
    expected[7] += 1.0
    torch.testing.assert_close(g, expected)
    free = token_logprobs(logits.detach(), ids, 1.0)
    torch.testing.assert_close(lp[0, 2].detach(), free[0, 2])
