"""The OPD advantage (``adv_estimator: opd``) against float64 references: the registered
sequence part λ·A_grpo, the per-token teacher part with several weighted teachers and
unaligned tokens, and its ``LossFn`` (what it hands the policy loss, its metrics)."""

from __future__ import annotations

import numpy as np
import pytest

from dockyard.core.config import config_from_dict
from dockyard.core.rl import (
    OPDPolicyLoss,
    PolicyLoss,
    compute_advantages,
    grpo_advantages,
    opd_token_advantages,
)


def _case(seed: int = 0, N: int = 2, B: int = 3, T: int = 5):
    rng = np.random.default_rng(seed)
    student = -rng.gamma(2.0, 1.0, size=(B, T))
    teachers = -rng.gamma(2.0, 1.0, size=(N, B, T))
    tmask = rng.random((N, B, T)) > 0.3
    mask = rng.random((B, T)) > 0.2
    return student, teachers, tmask, mask


def _reference(student, teachers, weights, seq, tmask, mask) -> np.ndarray:
    N, B, T = teachers.shape
    out = np.zeros((B, T))
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            on = [k for k in range(N) if tmask[k, b, t]]
            a = seq[b]
            if on:
                wsum = sum(weights[k] for k in on)
                a += sum(weights[k] / wsum * teachers[k, b, t] for k in on) - student[b, t]
            out[b, t] = a
    return out


def test_token_advantages_match_a_float64_reference() -> None:
    student, teachers, tmask, mask = _case()
    weights, seq = (1.0, 3.0), np.array([0.5, -1.0, 0.0])
    got = opd_token_advantages(student, teachers, weights, seq, teacher_mask=tmask, mask=mask)
    want = _reference(student, teachers, weights, seq, tmask, mask)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # one teacher everywhere, no reward part: log π_T − log π_θ, the negative reverse-KL sample
    one = opd_token_advantages(student, teachers[:1], (2.0,))
    np.testing.assert_allclose(one, teachers[0] - student, atol=1e-12)


def test_token_advantages_in_torch_equal_numpy_and_carry_no_gradient() -> None:
    torch = pytest.importorskip("torch")
    student, teachers, tmask, mask = _case(1)
    s = torch.tensor(student, requires_grad=True)
    got = opd_token_advantages(s, torch.tensor(teachers), (1.0, 2.0), None,
                               teacher_mask=torch.tensor(tmask), mask=torch.tensor(mask))  # fmt: skip
    assert not got.requires_grad
    want = opd_token_advantages(student, teachers, (1.0, 2.0), None, teacher_mask=tmask, mask=mask)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)


def test_the_registered_estimator_is_lambda_times_grpo() -> None:
    r = np.array([[1.0, 0.0, 0.0, 1.0], [0.2, 0.2, 0.2, 0.2]])
    got = compute_advantages(r, estimator="opd", reward_weight=0.25)
    np.testing.assert_allclose(got, 0.25 * grpo_advantages(r), atol=1e-12)
    assert not compute_advantages(r, estimator="opd").any()  # λ = 0: pure distillation


def test_bad_weights_are_refused() -> None:
    student, teachers, _, _ = _case()
    with pytest.raises(ValueError, match="2 teachers' logprobs but 1 weights"):
        opd_token_advantages(student, teachers, (1.0,))
    with pytest.raises(ValueError, match="must be > 0"):
        opd_token_advantages(student, teachers, (1.0, 0.0))


def test_the_loss_trains_the_policy_loss_on_the_opd_advantages() -> None:
    """OPDPolicyLoss = the clipped PG loss with A_t computed from the micro-batch's teacher
    logprobs; its metrics are the token means of the teacher and student logprobs."""
    student, teachers, tmask, mask = _case(2)
    seq = np.array([0.1, 0.2, -0.3])
    policy = PolicyLoss("clipped_pg", {"agg": "token-mean"})
    fn = OPDPolicyLoss(policy, (1.0, 3.0))
    assert fn.teacher_logprobs == 2
    lp = student + 0.01  # the step's logprobs; π_prev = the stop-gradient of them
    batch = {"advantages": seq, "loss_mask": mask, "teacher_logprobs": teachers,
             "teacher_logprob_mask": tmask}  # fmt: skip
    loss, m = fn(lp, batch)
    adv = _reference(lp, teachers, (1.0, 3.0), seq, tmask, mask)
    want, _ = policy(lp, {"advantages": adv, "loss_mask": mask})
    assert float(loss) == pytest.approx(float(want), abs=1e-12)
    assert float(m["opd/advantage"]) == pytest.approx(adv[mask].mean(), abs=1e-12)
    scored = mask & tmask.any(0)
    assert float(m["opd/reverse_kl"]) == pytest.approx(
        float(-(adv - seq[:, None])[scored].mean()), abs=1e-12
    )
    # π_prev from the batch when the driver computed it (several optimizer steps per batch)
    _, m2 = fn(lp, {**batch, "prev_logprobs": student})
    assert float(m2["opd/student_logprob"]) == pytest.approx(student[scored].mean(), abs=1e-12)
    clipped = OPDPolicyLoss(policy, (1.0, 3.0), clip=0.5)
    _, m3 = clipped(lp, batch)
    assert abs(float(m3["opd/advantage"])) <= 0.5


def test_the_config_builds_the_loss() -> None:
    cfg = config_from_dict({
        "policy": {"model_name": "x"},
        "grpo": {"adv_estimator": {"name": "opd", "reward_weight": 0.5, "advantage_clip": 5.0,
                                   "teachers": [{"model_name": "a", "weight": 2.0},
                                                {"model_name": "b"}]}},
    })  # fmt: skip
    fn = OPDPolicyLoss.from_config(cfg.loss_fn, cfg.grpo.adv_estimator, norm_length=64)
    assert fn.weights == (2.0, 1.0)
    assert fn.clip == 5.0
    assert fn.policy.name == "clipped_pg"
    assert fn.policy == PolicyLoss.from_config(cfg.loss_fn, norm_length=64)
    assert cfg.grpo.adv_estimator.estimator_options() == {
        "reward_weight": 0.5, "normalize_std": True
    }  # fmt: skip
    with pytest.raises(ValueError, match="teachers"):
        config_from_dict({"policy": {"model_name": "x"},
                          "grpo": {"adv_estimator": {"name": "opd", "teachers": []}}})  # fmt: skip
