"""Hypothesis properties of the RL math."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dockyard.core.rl import clipped_pg_loss, compute_advantages, kl_estimate

floats = st.floats(-10, 10, allow_nan=False, width=64)
SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def reward_tables(draw):
    P = draw(st.integers(1, 5))
    G = draw(st.integers(1, 6))
    r = draw(arrays(np.float64, (P, G), elements=st.sampled_from([0.0, 0.5, 1.0]) | floats))
    valid = draw(arrays(np.bool_, (P, G)))
    return r, valid


@SETTINGS
@given(reward_tables(), st.booleans())
def test_grpo_mean_baseline_sums_to_zero_per_group(table, normalize_std):
    r, valid = table
    a = compute_advantages(r, valid, normalize_std=normalize_std)
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose((a * valid).sum(axis=1), 0.0, atol=1e-8)
    assert np.all(a[~valid] == 0.0)


@SETTINGS
@given(reward_tables())
def test_rloo_sums_to_zero_per_group(table):
    r, valid = table
    a = compute_advantages(r, valid, estimator="rloo")
    np.testing.assert_allclose(a.sum(axis=1), 0.0, atol=1e-8)


@SETTINGS
@given(
    arrays(np.float64, (3, 5), elements=st.floats(-30, 0, allow_nan=False)),
    arrays(np.float64, (3,), elements=floats),
    arrays(np.bool_, (3, 5)),
    st.floats(0.01, 0.5),
    st.floats(0.01, 0.5),
)
def test_clip_fraction_zero_at_ratio_one(lp, adv, mask, eps_low, eps_high):
    loss, m = clipped_pg_loss(
        lp, adv, mask, prev_logprobs=lp.copy(), eps_low=eps_low, eps_high=eps_high, dual_clip_c=3.0
    )
    assert m["clip_fraction"] == 0.0
    assert m["dual_clip_fraction"] == 0.0
    assert abs(m["approx_kl"]) < 1e-12
    # at ratio 1 the loss is −mean(A) over loss tokens
    n = max(mask.sum(), 1)
    np.testing.assert_allclose(loss, -(adv[:, None] * mask).sum() / n, atol=1e-9)


@SETTINGS
@given(
    arrays(np.float64, (4, 6), elements=st.floats(-100, 0, allow_nan=False)),
    arrays(np.float64, (4, 6), elements=st.floats(-100, 0, allow_nan=False)),
)
def test_k2_k3_nonnegative(lp, lref):
    for kind in ("k2", "k3"):
        out = kl_estimate(lp, lref, kind)
        assert np.all(out >= 0.0)
        assert np.all(np.isfinite(out))
    # zero exactly when the policies agree
    assert np.all(kl_estimate(lp, lp, "k3") == 0.0)
