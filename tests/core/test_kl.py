"""KL estimators: exact expectations pin the direction (k3 estimates KL(π ‖ π_ref) under
samples of π with x = log π_ref − log π), plus closed forms on fixed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dockyard.core.rl import kl_estimate


def _dists(rng, V=7):
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    return p, q


def test_k3_pinned_values():
    # x = log π_ref − log π = log(0.2) − log(0.5)
    lp, lref = np.log(np.array([[0.5]])), np.log(np.array([[0.2]]))
    x = math.log(0.2) - math.log(0.5)
    assert kl_estimate(lp, lref, "k3")[0, 0] == pytest.approx(math.exp(x) - x - 1, rel=1e-14)
    assert kl_estimate(lp, lref, "k3")[0, 0] == pytest.approx(0.4 - math.log(0.4) - 1, rel=1e-14)
    assert kl_estimate(lp, lref, "k1")[0, 0] == pytest.approx(-x, rel=1e-14)
    assert kl_estimate(lp, lref, "k2")[0, 0] == pytest.approx(0.5 * x * x, rel=1e-14)


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_estimators_have_forward_kl_expectation(kind, rng):
    """E_{y~π}[k(y)] = KL(π ‖ π_ref) = Σ π log(π/π_ref) exactly, for k1 and k3; the reversed k3
    (x = log π − log π_ref) does not."""
    for _ in range(5):
        p, q = _dists(rng)
        lp, lq = np.log(p)[None], np.log(q)[None]
        kl_fwd = float(np.sum(p * (np.log(p) - np.log(q))))
        kl_rev = float(np.sum(q * (np.log(q) - np.log(p))))
        expect = float(np.sum(p * kl_estimate(lp, lq, kind)[0]))
        assert expect == pytest.approx(kl_fwd, rel=1e-10)
        if kind == "k3":
            x_rev = np.log(p) - np.log(q)
            reversed_expect = float(np.sum(p * (np.exp(x_rev) - x_rev - 1)))
            assert abs(reversed_expect - kl_fwd) > 1e-3
            assert abs(reversed_expect - kl_rev) > 1e-3  # not even the reverse KL


def test_mask_and_clamp(rng):
    lp = np.array([[-1.0, -500.0, -2.0]])
    lref = np.array([[-1.5, -0.1, -900.0]])
    mask = np.array([[True, False, True]])
    out = kl_estimate(lp, lref, "k3", mask=mask)
    assert out[0, 1] == 0.0
    assert np.isfinite(out).all()
    x = max(-20.0, -898.0)
    assert out[0, 2] == pytest.approx(math.exp(x) - x - 1)
    with pytest.raises(ValueError, match="k1"):
        kl_estimate(lp, lref, "k4")  # type: ignore[arg-type]
