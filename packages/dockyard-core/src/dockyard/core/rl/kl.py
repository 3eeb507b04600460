"""Per-token estimators of KL(π ‖ π_ref) from tokens sampled from π (Schulman 2020,
"Approximating KL divergence", http://joschu.net/blog/kl-approx.html).

With x = log π_ref(y) − log π(y) (so e^x = π_ref/π, the ratio whose expectation under π is 1):

* k1 = −x                       unbiased, high variance, can be negative
* k2 = x² / 2                   biased, low variance, ≥ 0
* k3 = eˣ − x − 1               unbiased, low variance, ≥ 0 (the GRPO paper's estimator)

Direction matters: k3 with x = log π − log π_ref (a bug seen in the wild) estimates the
*reverse* KL(π_ref ‖ π) under the wrong sampling distribution; ``test_kl.py`` pins the
standard direction numerically.

Departure: x is clamped to [−``clamp``, ``clamp``] (default 20) before e^x so that a very
unlikely token cannot overflow float32 and poison the gradient with inf·0 = NaN.
"""

from __future__ import annotations

from typing import Any, Literal

from dockyard.core.rl._xp import Array, namespace

KLType = Literal["k1", "k2", "k3"]
KL_CLAMP = 20.0


def kl_estimate(
    logprobs: Array,
    ref_logprobs: Array,
    kind: KLType = "k3",
    mask: Any = None,
    clamp: float | None = KL_CLAMP,
) -> Array:
    """Per-token KL(π ‖ π_ref) estimate.

    Args:
        logprobs: ``[B, T]`` log π of the sampled tokens (gradient flows through these).
        ref_logprobs: ``[B, T]`` log π_ref of the same tokens.
        kind: ``"k1"``, ``"k2"`` or ``"k3"``.
        mask: optional ``[B, T]`` bool; masked positions return 0 (and carry no gradient).
        clamp: bound on |x| before the estimator (None: no clamp).

    Returns:
        ``[B, T]`` per-token estimates, same array type as ``logprobs``.
    """
    xp = namespace(logprobs, ref_logprobs, mask)
    x = ref_logprobs - logprobs
    if mask is not None:
        x = xp.where(mask, x, 0.0)
    if clamp is not None:
        x = xp.clip(x, -clamp, clamp)
    if kind == "k1":
        out = -x
    elif kind == "k2":
        out = 0.5 * x * x
    elif kind == "k3":
        out = xp.expm1(x) - x
    else:
        raise ValueError(f"unknown KL estimator {kind!r}: use 'k1', 'k2' or 'k3'")
    return out if mask is None else xp.where(mask, out, 0.0)
