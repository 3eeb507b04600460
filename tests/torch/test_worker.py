"""The torch policy worker on one process: logprobs, micro-batching, packing, reference, config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dockyard.core.rl import MaskedNLLLoss, PolicyLoss
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker


def _weights(worker) -> dict[str, np.ndarray]:
    return {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}


def _hf_logprobs(path, batch, temperature=1.0) -> np.ndarray:
    """Reference: plain transformers, one unpadded sequence at a time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    out = np.zeros(batch.input_ids.shape, dtype=np.float32)
    with torch.no_grad():
        for b in range(batch.input_ids.shape[0]):
            n = int(batch.attention_mask[b].sum())
            ids = torch.as_tensor(batch.input_ids[b, :n])[None]
            logp = torch.log_softmax(model(ids).logits[0, :-1] / temperature, dim=-1)
            out[b, 1:n] = logp.gather(-1, ids[0, 1:, None])[:, 0].numpy()
    return out


@pytest.fixture(scope="module")
def batch():
    return random_batch(8, 32, seed=3)


def test_logprobs_match_transformers_padded_and_packed(base_config, batch):
    """Padded, dynamic-batched and FFD-packed logprobs all equal per-sequence HF logprobs."""
    cfg = {**base_config, "generation_temperature": 0.7, "reference_policy": False}
    expected = _hf_logprobs(cfg["model_name"], batch, temperature=0.7)
    padded = TorchPolicyWorker(cfg)
    np.testing.assert_allclose(padded.get_logprobs(batch), expected, atol=2e-5)
    packed = TorchPolicyWorker(
        {**cfg, "sequence_packing": {"enabled": True, "logprob_mb_tokens": 70}}
    )
    np.testing.assert_allclose(packed.get_logprobs(batch), expected, atol=2e-5)
    dynamic = TorchPolicyWorker(
        {**cfg, "dynamic_batching": {"enabled": True, "logprob_mb_tokens": 64}}
    )
    np.testing.assert_allclose(dynamic.get_logprobs(batch), expected, atol=2e-5)
    assert (expected[batch.attention_mask] != 0).mean() > 0.8  # not trivially zero

    v1, i1 = padded.get_topk_logits(batch, 4)
    v2, i2 = packed.get_topk_logits(batch, 4)
    assert v1.shape == (8, 32, 4)
    np.testing.assert_allclose(v1, v2, atol=2e-5)
    np.testing.assert_array_equal(i1, i2)
    assert np.all(v1[:, 0] == 0)
    assert np.all(v1[~batch.attention_mask] == 0)
    assert np.all(np.diff(v1[batch.attention_mask], axis=-1) <= 0)  # sorted descending


@pytest.mark.parametrize(
    "variant",
    [
        {"train_micro_batch_size": 1},
        {"train_micro_batch_size": 3},
        {"sequence_packing": {"enabled": True, "train_mb_tokens": 64}},
        {"dynamic_batching": {"enabled": True, "train_mb_tokens": 64}},
    ],
    ids=["mb1", "mb3", "packed", "dynamic"],
)
def test_update_does_not_depend_on_micro_batching(base_config, batch, variant, one_batch_run):
    ref, weights_ref = one_batch_run
    worker = TorchPolicyWorker({**base_config, "reference_policy": False, **variant})
    metrics = worker.train_step(batch, PolicyLoss(options={"kl_beta": 0.0}))
    # Adam is invariant to a constant gradient scale: the grad norm pins the normalisation
    assert metrics["loss"] == pytest.approx(ref["loss"], abs=1e-6)
    assert metrics["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5)
    _assert_close_update(_weights(worker), weights_ref)


@pytest.mark.parametrize("mb", [8, 3, 1])
def test_sft_nll_metric_is_the_batch_mean_whatever_the_micro_batching(base_config, batch, mb):
    """``nll`` is the step's mean token NLL: equal to the (token-mean) loss with one
    micro-batch or several (each micro-batch's own mean, weighted by its tokens)."""
    worker = TorchPolicyWorker(
        {**base_config, "reference_policy": False, "train_micro_batch_size": mb}
    )
    lp = worker.get_logprobs(batch)
    want = float(-lp[batch.loss_mask].sum() / batch.loss_mask.sum())
    metrics = worker.train_step(batch, MaskedNLLLoss())
    assert metrics["loss"] == pytest.approx(want, rel=1e-5)
    assert metrics["nll"] == pytest.approx(want, rel=1e-5)


def _assert_close_update(got, expected, lr=1e-3):
    """Equal up to 1% of one Adam step (lr): elements whose gradient is near Adam's ε can
    differ by more than float32 rounding between two summation orders."""
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=0, atol=0.01 * lr, err_msg=name)


@pytest.fixture(scope="module")
def one_batch_run(base_config, batch):
    """The whole batch as one micro-batch: the reference update."""
    worker = TorchPolicyWorker(
        {**base_config, "reference_policy": False, "train_micro_batch_size": 8}
    )
    before = _weights(worker)
    metrics = worker.train_step(batch, PolicyLoss(options={"kl_beta": 0.0}))
    after = _weights(worker)
    assert max(np.abs(after[k] - before[k]).max() for k in before) > 1e-4
    assert metrics["num_loss_tokens"] == batch.num_loss_tokens()
    assert worker.step == 1
    return metrics, after


def test_reference_stays_frozen_while_policy_trains(base_config, batch):
    worker = TorchPolicyWorker({**base_config, "optimizer": {"lr": 1e-2}})
    ref0 = worker.get_reference_logprobs(batch)
    np.testing.assert_allclose(worker.get_logprobs(batch), ref0, atol=1e-6)
    for _ in range(3):
        worker.train_step(batch, MaskedNLLLoss())
    np.testing.assert_allclose(worker.get_reference_logprobs(batch), ref0, atol=1e-6)
    lp = worker.get_logprobs(batch)
    # NLL training raises the likelihood of the loss tokens
    assert lp[batch.loss_mask].mean() > ref0[batch.loss_mask].mean() + 0.05


def test_activation_checkpointing_gives_the_same_update(base_config, batch, one_batch_run):
    _, weights_ref = one_batch_run
    worker = TorchPolicyWorker(
        {
            **base_config,
            "reference_policy": False,
            "train_micro_batch_size": 8,
            "activation_checkpointing": True,
        }
    )
    worker.train_step(batch, PolicyLoss(options={"kl_beta": 0.0}))
    _assert_close_update(_weights(worker), weights_ref)


def test_checkpoint_round_trip_restores_rng_and_step(base_config, batch, tmp_path):
    worker = TorchPolicyWorker({**base_config, "reference_policy": False})
    worker.train_step(batch, MaskedNLLLoss())
    worker.save_checkpoint(str(tmp_path / "ck"), extra_state={"data_cursor": 17})
    draw = torch.rand(3)
    m2 = worker.train_step(batch, MaskedNLLLoss())
    w2 = _weights(worker)
    other = TorchPolicyWorker({**base_config, "reference_policy": False})
    assert other.load_checkpoint(str(tmp_path / "ck")) == {"data_cursor": 17}
    assert other.step == 1
    torch.testing.assert_close(torch.rand(3), draw)
    m2b = other.train_step(batch, MaskedNLLLoss())
    assert m2b["loss"] == pytest.approx(m2["loss"], abs=1e-6)
    got = _weights(other)
    for name, value in w2.items():
        np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-6, err_msg=name)
    with pytest.raises(FileNotFoundError, match="not a dockyard checkpoint"):
        other.load_checkpoint(str(tmp_path))


def test_config_errors_name_the_key(qwen2_path):
    from pydantic import ValidationError

    from dockyard.torch.config import TorchPolicyConfig

    with pytest.raises(ValidationError, match="micro_batch"):
        TorchPolicyConfig(model_name=str(qwen2_path), micro_batch=3)
    with pytest.raises(ValidationError, match="choose one"):
        TorchPolicyConfig(
            model_name=str(qwen2_path),
            sequence_packing={"enabled": True},
            dynamic_batching={"enabled": True},
        )


def test_export_copies_unless_asked_for_views(base_config, batch):
    """``export_weights`` hands out copies (kept arrays survive a step); ``copy=False`` views
    the live CPU parameters (a sender's export: the same values, one copy of the model less)."""
    worker = TorchPolicyWorker({**base_config, "reference_policy": False})
    params = [p.detach().numpy() for p in worker.model.state_dict().values()]
    copies = _weights(worker)
    views = {k: v for b in worker.export_weights(1 << 30, copy=False) for k, v in b.items()}
    assert copies.keys() == views.keys()
    for k in copies:
        np.testing.assert_array_equal(copies[k], views[k])
        assert not any(np.shares_memory(copies[k], p) for p in params), k
        assert any(np.shares_memory(views[k], p) for p in params), k
    before = {k: v.copy() for k, v in views.items()}
    worker.train_step(batch, MaskedNLLLoss())
    assert any(not np.array_equal(copies[k], _weights(worker)[k]) for k in copies)
    for k in copies:
        np.testing.assert_array_equal(copies[k], before[k])  # the copies did not move
