"""Preference, Bradley–Terry, NLL, top-k distillation and DAPO shaping against plain float64
references written out from the papers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dockyard.core.rl import (
    bradley_terry_loss,
    dynamic_sampling_keep,
    masked_nll,
    overlong_filter,
    overlong_penalty,
    preference_loss,
    topk_forward_kl,
)


def logsig(z: float) -> float:
    return -math.log1p(math.exp(-z)) if z > 0 else z - math.log1p(math.exp(z))


def ref_pref(
    variant,
    pc,
    pr,
    rc,
    rr,
    lc,
    lr,
    beta=0.1,
    eps=0.0,
    lam=50.0,
    alpha=0.01,
    gamma=0.5,
    orpo_lam=0.1,
    sft=0.0,
):
    losses = []
    for i in range(len(pc)):
        h = (pc[i] - rc[i]) - (pr[i] - rr[i])
        if variant == "dpo":
            ell = -logsig(beta * h)
        elif variant == "cdpo":
            ell = -(1 - eps) * logsig(beta * h) - eps * logsig(-beta * h)
        elif variant == "ipo":
            ell = (h - 1 / (2 * beta)) ** 2
        elif variant == "dpop":
            ell = -logsig(beta * (h - lam * max(0.0, rc[i] - pc[i])))
        elif variant == "rdpo":
            ell = -logsig(beta * h - alpha * (lc[i] - lr[i]))
        elif variant == "simpo":
            ell = -logsig(beta * pc[i] / lc[i] - beta * pr[i] / lr[i] - gamma)
        else:  # orpo
            mc, mr = pc[i] / lc[i], pr[i] / lr[i]
            odds = lambda m: m - math.log(1 - math.exp(m))  # noqa: E731
            ell = -mc - orpo_lam * logsig(odds(mc) - odds(mr))
        ell += sft * (-pc[i] / lc[i])
        losses.append(ell)
    return sum(losses) / len(losses)


@pytest.mark.parametrize("variant", ["dpo", "cdpo", "ipo", "dpop", "rdpo", "simpo", "orpo"])
@pytest.mark.parametrize("sft", [0.0, 0.5])
def test_preference_losses(variant, sft, rng):
    B = 7
    lc = rng.integers(3, 40, B).astype(float)
    lr = rng.integers(3, 40, B).astype(float)
    pc = -lc * rng.uniform(0.2, 2.0, B)
    pr = -lr * rng.uniform(0.2, 2.0, B)
    rc = pc + rng.normal(0, 2, B)
    rr = pr + rng.normal(0, 2, B)
    opts = {
        "beta": 0.3,
        "label_smoothing": 0.2,
        "dpop_lambda": 5.0,
        "rdpo_alpha": 0.05,
        "simpo_gamma": 0.4,
        "orpo_lambda": 0.2,
    }
    loss, m = preference_loss(
        variant, pc, pr, rc, rr, chosen_lengths=lc, rejected_lengths=lr, sft_weight=sft, **opts
    )
    want = ref_pref(
        variant,
        pc,
        pr,
        rc,
        rr,
        lc,
        lr,
        beta=0.3,
        eps=0.2,
        lam=5.0,
        alpha=0.05,
        gamma=0.4,
        orpo_lam=0.2,
        sft=sft,
    )
    assert loss == pytest.approx(want, rel=1e-10)
    assert 0.0 <= m["preference_accuracy"] <= 1.0


@pytest.mark.parametrize("variant", ["dpo", "ipo", "rdpo", "simpo", "orpo"])
def test_preference_pairs_loss_sums_adjacent_rows(variant, rng):
    """The LossFn over rows (chosen 2i, rejected 2i + 1) is the per-pair loss of the rows'
    masked sums, and micro-batches of whole pairs add up to the whole batch's loss."""
    from dockyard.core.rl import PreferenceLoss, PreferencePairsLoss

    B, T = 6, 9  # 3 pairs
    lp = -rng.uniform(0.1, 3.0, (B, T))
    ref = lp + rng.normal(0, 0.5, (B, T))
    mask = np.zeros((B, T), dtype=bool)
    for i, (start, end) in enumerate([(2, 9), (2, 5), (4, 8), (4, 9), (1, 3), (1, 9)]):
        mask[i, start:end] = True
    sums = np.where(mask, lp, 0).sum(1)
    rsums = np.where(mask, ref, 0).sum(1)
    n = mask.sum(1).astype(float)
    opts = {"beta": 0.2, "sft_weight": 0.3}
    want, _ = preference_loss(variant, sums[0::2], sums[1::2], rsums[0::2], rsums[1::2],
                              chosen_lengths=n[0::2], rejected_lengths=n[1::2], **opts)  # fmt: skip
    fn = PreferencePairsLoss(PreferenceLoss(variant, opts))
    assert fn.rows_per_group == 2
    batch = {"loss_mask": mask, "ref_logprobs": ref}
    got, m = fn(lp, batch)
    assert got == pytest.approx(want, rel=1e-12)
    assert m["logps_chosen"] == pytest.approx(sums[0::2].mean())
    parts = [
        fn(lp[rows], {"loss_mask": mask[rows], "ref_logprobs": ref[rows], "num_sequences": B})[0]
        for rows in (slice(0, 2), slice(2, 6))
    ]
    assert sum(parts) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="whole \\(chosen, rejected\\) pairs"):
        fn(lp[:3], {"loss_mask": mask[:3], "ref_logprobs": ref[:3]})


def test_preference_needs_reference():
    with pytest.raises(ValueError, match="ref_chosen_logps"):
        preference_loss("dpo", np.zeros(2), np.zeros(2))
    with pytest.raises(KeyError, match="did you mean 'dpo'"):
        preference_loss("dpoo", np.zeros(2), np.zeros(2))


def test_dpo_gradient_sign():
    torch = pytest.importorskip("torch")
    pc = torch.tensor([-5.0], dtype=torch.float64, requires_grad=True)
    pr = torch.tensor([-5.0], dtype=torch.float64, requires_grad=True)
    loss, _ = preference_loss(
        "dpo",
        pc,
        pr,
        torch.tensor([-5.0], dtype=torch.float64),
        torch.tensor([-5.0], dtype=torch.float64),
    )
    loss.backward()
    assert pc.grad.item() == pytest.approx(-0.1 * 0.5)
    assert pr.grad.item() == pytest.approx(0.1 * 0.5)


def test_bradley_terry(rng):
    c, r = rng.normal(size=9), rng.normal(size=9)
    loss, m = bradley_terry_loss(c, r)
    assert loss == pytest.approx(
        sum(-logsig(a - b) for a, b in zip(c, r, strict=True)) / 9, rel=1e-12
    )
    margin = np.full(9, 0.5)
    loss_m, _ = bradley_terry_loss(c, r, margin)
    assert loss_m == pytest.approx(
        sum(-logsig(a - b - 0.5) for a, b in zip(c, r, strict=True)) / 9, rel=1e-12
    )
    assert m["rm_accuracy"] == pytest.approx(float(np.mean(c > r)))


def test_masked_nll(rng):
    lp = -rng.uniform(0, 5, (4, 6))
    mask = rng.random((4, 6)) > 0.4
    loss, _ = masked_nll(lp, mask)
    want = sum(-lp[b, t] for b in range(4) for t in range(6) if mask[b, t]) / mask.sum()
    assert loss == pytest.approx(want, rel=1e-12)
    loss_g, _ = masked_nll(lp, mask, num_loss_tokens=100)
    assert loss_g == pytest.approx(want * mask.sum() / 100, rel=1e-12)


def test_topk_forward_kl(rng):
    B, T, V, k, tau = 2, 3, 11, 4, 1.5
    zs = rng.normal(size=(B, T, V))
    zt_full = rng.normal(size=(B, T, V))
    idx = np.argsort(-zt_full, axis=-1)[..., :k]
    zt = np.take_along_axis(zt_full, idx, -1)
    mask = np.array([[True, True, False], [True, False, True]])
    loss, _ = topk_forward_kl(zs, zt, idx, mask, temperature=tau)
    total, n = 0.0, 0
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            ls = zs[b, t] / tau
            logq = ls - math.log(sum(math.exp(v) for v in ls))
            lt = zt[b, t] / tau
            logz = math.log(sum(math.exp(v) for v in lt))
            kl = sum(
                math.exp(lt[i] - logz) * ((lt[i] - logz) - logq[idx[b, t, i]]) for i in range(k)
            )
            total += kl
            n += 1
    assert loss == pytest.approx(total / n, rel=1e-10)
    # identical distributions on the top-k support with no student mass elsewhere -> ~0
    big = np.full((1, 1, V), -1e4)
    big[0, 0, idx[0, 0]] = zt[0, 0]
    loss0, _ = topk_forward_kl(big, zt[:1, :1], idx[:1, :1], temperature=1.0)
    assert abs(loss0) < 1e-9


def test_overlong_penalty():
    L, C = 100, 20
    lengths = np.array([0, 50, 80, 81, 90, 100, 101, 500])
    want = [0 if n <= L - C else ((L - C) - n) / C if n <= L else -1 for n in lengths]
    np.testing.assert_allclose(
        overlong_penalty(lengths, max_response_length=L, buffer_length=C), want
    )
    np.testing.assert_allclose(
        overlong_penalty(lengths, max_response_length=L, buffer_length=C, penalty=0.5),
        0.5 * np.array(want),
    )
    with pytest.raises(ValueError, match="buffer_length"):
        overlong_penalty(lengths, max_response_length=10, buffer_length=20)


def test_filters():
    r = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.7], [1.0, 0.0, 0.0]])
    valid = np.array([[True] * 3, [True] * 3, [True, True, False], [True, False, False]])
    np.testing.assert_array_equal(dynamic_sampling_keep(r, valid), [False, True, False, False])
    np.testing.assert_array_equal(dynamic_sampling_keep(r), [False, True, True, True])
    np.testing.assert_array_equal(
        overlong_filter(np.array([True, True, False]), np.array([True, False, False])),
        [False, True, False],
    )
