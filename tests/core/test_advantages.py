"""Advantage estimators against plain float64 references written with Python loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dockyard.core.rl import ADVANTAGE_ESTIMATORS, compute_advantages

EPS = 1e-6


def _groups(rewards, valid):
    for p in range(rewards.shape[0]):
        idx = [g for g in range(rewards.shape[1]) if valid[p, g]]
        yield p, idx, [float(rewards[p, g]) for g in idx]


def ref_grpo(rewards, valid, loo=False, std=True):
    out = np.zeros(rewards.shape)
    for p, idx, rs in _groups(rewards, valid):
        n = len(rs)
        if n < 2 or max(rs) == min(rs):
            continue
        mean = sum(rs) / n
        sd = math.sqrt(sum((r - mean) ** 2 for r in rs) / (n - 1))
        for g, r in zip(idx, rs, strict=True):
            base = (sum(rs) - r) / (n - 1) if loo else mean
            a = r - base
            out[p, g] = a / (sd + EPS) if std else a
    return out


def ref_whiten(values, weights):
    tot = sum(w for w in weights.flat)
    mu = sum(w * a for w, a in zip(weights.flat, values.flat, strict=True)) / tot
    var = sum(w * (a - mu) ** 2 for w, a in zip(weights.flat, values.flat, strict=True)) / tot
    vals = [a for w, a in zip(weights.flat, values.flat, strict=True) if w > 0]
    out = np.zeros(values.shape)
    if max(vals) == min(vals):
        return out
    for i, (w, a) in enumerate(zip(weights.flat, values.flat, strict=True)):
        if w > 0:
            out.flat[i] = (a - mu) / (math.sqrt(var) + EPS)
    return out


def ref_reinforce_pp(rewards, valid, counts, baseline=True):
    a = np.zeros(rewards.shape)
    for p, idx, rs in _groups(rewards, valid):
        mean = sum(rs) / len(rs) if rs else 0.0
        for g, r in zip(idx, rs, strict=True):
            a[p, g] = r - mean if baseline else r
    return ref_whiten(a, valid * counts)


def ref_gdpo(comps, valid):
    total = sum(ref_grpo(c, valid) for c in comps)
    return ref_whiten(total, valid.astype(float))


@pytest.fixture
def table(rng):
    """8 groups of 5: binary rewards, one all-equal group, one single-sample group, one group
    of equal non-binary floats (0.1 × 3 is not bit-equal to its mean)."""
    r = rng.integers(0, 2, (8, 5)).astype(float)
    r[0] = 1.0
    r[2] = 0.1
    r[3] = rng.normal(size=5)
    valid = rng.random((8, 5)) > 0.2
    valid[1] = [True, False, False, False, False]
    valid[2] = True
    return r, valid


def test_grpo_matches_reference(table):
    r, v = table
    np.testing.assert_allclose(compute_advantages(r, v), ref_grpo(r, v), rtol=1e-12, atol=1e-12)


def test_grpo_leave_one_out_and_no_std(table):
    r, v = table
    np.testing.assert_allclose(
        compute_advantages(r, v, leave_one_out=True), ref_grpo(r, v, loo=True), atol=1e-12
    )
    np.testing.assert_allclose(
        compute_advantages(r, v, estimator="dr_grpo"), ref_grpo(r, v, std=False), atol=1e-12
    )
    np.testing.assert_allclose(
        compute_advantages(r, v, estimator="rloo"), ref_grpo(r, v, loo=True, std=False), atol=1e-12
    )


def test_rloo_equals_scaled_mean_baseline(table):
    r, _ = table
    G = r.shape[1]
    np.testing.assert_allclose(
        compute_advantages(r, estimator="rloo"),
        G / (G - 1) * (r - r.mean(1, keepdims=True)) * (r.max(1) > r.min(1))[:, None],
        atol=1e-12,
    )


def test_degenerate_groups_give_exact_zero(table):
    r, v = table
    for est in ("grpo", "dr_grpo", "rloo"):
        a = compute_advantages(r, v, estimator=est)
        assert np.all(a[:3] == 0.0), est
        assert np.all(a[~v] == 0.0)


def test_reinforce_pp_token_whitening(table, rng):
    r, v = table
    counts = rng.integers(1, 50, r.shape)
    for baseline in (True, False):
        got = compute_advantages(
            r, v, estimator="reinforce_plus_plus", token_counts=counts, group_baseline=baseline
        )
        np.testing.assert_allclose(got, ref_reinforce_pp(r, v, counts, baseline), atol=1e-10)
    # token-weighted mean of the result is 0, weighted variance ~1
    w = v * counts
    got = compute_advantages(r, v, estimator="reinforce_plus_plus", token_counts=counts)
    assert abs((w * got).sum() / w.sum()) < 1e-10


def test_gdpo_per_component_normalisation(rng):
    v = rng.random((6, 4)) > 0.1
    comps = [rng.integers(0, 2, (6, 4)).astype(float), 100.0 * rng.normal(size=(6, 4))]
    got = compute_advantages(np.stack(comps, -1), v, estimator="gdpo")
    np.testing.assert_allclose(got, ref_gdpo(comps, v), atol=1e-10)
    named = compute_advantages(
        {"reward/tests": comps[0], "reward/len": comps[1]}, v, estimator="gdpo"
    )
    np.testing.assert_allclose(named, got, atol=1e-12)


def test_clip_and_errors(table):
    r, v = table
    a = compute_advantages(r * 100, v, estimator="dr_grpo", clip=2.0)
    assert a.max() <= 2.0
    assert a.min() >= -2.0
    assert a.max() == 2.0
    with pytest.raises(TypeError, match=r"'rloo'.*leave_one_out"):
        compute_advantages(r, v, estimator="rloo", leave_one_out=True)
    with pytest.raises(KeyError, match="did you mean 'grpo'"):
        compute_advantages(r, v, estimator="grp")
    assert set(ADVANTAGE_ESTIMATORS.names()) == {
        "grpo",
        "dr_grpo",
        "rloo",
        "reinforce_plus_plus",
        "gdpo",
        "opd",
    }
