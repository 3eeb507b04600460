"""Clipped policy gradient (PPO/GRPO/DAPO/GSPO, dual clip), CISPO, IS correction, aggregation:
values against the loop reference in reference.py; gradients by torch.gradcheck."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from dockyard.core.rl import (
    PolicyLoss,
    cispo_loss,
    clipped_pg_loss,
    importance_weights,
)

sys.path.insert(0, str(Path(__file__).parent))
_spec = importlib.util.spec_from_file_location(
    "core_reference", Path(__file__).parent / "reference.py"
)
ref = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(ref)  # type: ignore[union-attr]
from conftest import pg_batch  # noqa: E402

CASES = {
    "ppo": {},
    "dapo_clip_higher": {"eps_low": 0.2, "eps_high": 0.28},
    "dual_clip": {"dual_clip_c": 3.0},
    "kl_k3": {"kl_beta": 0.1, "kl_type": "k3"},
    "kl_k1_seq": {"kl_beta": 0.05, "kl_type": "k1", "agg": "seq-mean-token-mean"},
    "kl_k2_seqsum": {"kl_beta": 0.05, "kl_type": "k2", "agg": "seq-mean-token-sum"},
    "gspo": {
        "sequence_level_ratio": True,
        "agg": "seq-mean-token-mean",
        "eps_low": 3e-4,
        "eps_high": 4e-4,
    },
    "dr_grpo_norm": {"agg": "seq-mean-token-sum-norm", "norm_length": 16},
    "tis": {"is_correction": True, "is_type": "tis", "is_ratio_max": 1.2},
    "tis_min": {"is_correction": True, "is_type": "tis", "is_ratio_max": 1.3, "is_ratio_min": 0.9},
    "icepop": {
        "is_correction": True,
        "is_type": "icepop",
        "is_ratio_max": 1.2,
        "is_ratio_min": 0.8,
    },
    "seq_mask_tis": {
        "is_correction": True,
        "is_type": "seq-mask-tis",
        "is_ratio_max": 1.05,
        "is_ratio_min": 0.95,
    },
}


def _ref_kwargs(kw):
    m = {
        "eps_low": "eps_low",
        "eps_high": "eps_high",
        "dual_clip_c": "c",
        "kl_beta": "beta",
        "kl_type": "kl",
        "is_correction": "is_on",
        "is_type": "is_type",
        "is_ratio_max": "wmax",
        "is_ratio_min": "wmin",
        "sequence_level_ratio": "gspo",
        "agg": "agg",
        "norm_length": "norm_length",
    }
    out = {m[k]: v for k, v in kw.items()}
    if "eps_low" in out and "eps_high" not in out:
        out["eps_high"] = out["eps_low"]
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_clipped_pg_matches_reference(case, rng):
    d = pg_batch(rng, spread=0.4 if case != "gspo" else 1e-3)
    kw = CASES[case]
    loss, metrics = clipped_pg_loss(
        d["logprobs"],
        d["advantages"],
        d["mask"],
        prev_logprobs=d["prev_logprobs"],
        gen_logprobs=d["gen_logprobs"],
        ref_logprobs=d["ref_logprobs"],
        **kw,
    )
    want = ref.clipped_pg_ref(
        d["logprobs"],
        d["prev_logprobs"],
        d["gen_logprobs"],
        d["ref_logprobs"],
        d["advantages"],
        d["mask"],
        **_ref_kwargs(kw),
    )
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, want, rtol=1e-10, atol=1e-12)
    assert all(np.isfinite(v) for v in metrics.values())


def test_cases_are_not_vacuous(rng):
    """The reference cases exercise what they name: clipping, dual clip, IS masking happen."""
    d = pg_batch(rng, spread=0.8)
    args = (d["logprobs"], d["advantages"], d["mask"])
    _, m = clipped_pg_loss(*args, prev_logprobs=d["prev_logprobs"], dual_clip_c=1.5)
    assert m["clip_fraction"] > 0.1
    assert m["dual_clip_fraction"] > 0
    _, m = clipped_pg_loss(
        *args,
        prev_logprobs=d["prev_logprobs"],
        gen_logprobs=d["gen_logprobs"],
        is_correction=True,
        is_type="icepop",
        is_ratio_max=1.2,
        is_ratio_min=0.8,
    )
    assert 0 < m["is_masked_fraction"] < 1


@pytest.mark.parametrize("case", ["ppo", "kl_k3", "tis"])
def test_cispo_matches_reference(case, rng):
    d = pg_batch(rng)
    kw = dict(CASES[case].items())
    kw.setdefault("eps_low", 1.0)
    kw.setdefault("eps_high", 0.28)
    loss, _m = cispo_loss(
        d["logprobs"],
        d["advantages"],
        d["mask"],
        prev_logprobs=d["prev_logprobs"],
        gen_logprobs=d["gen_logprobs"],
        ref_logprobs=d["ref_logprobs"],
        **kw,
    )
    want = ref.clipped_pg_ref(
        d["logprobs"],
        d["prev_logprobs"],
        d["gen_logprobs"],
        d["ref_logprobs"],
        d["advantages"],
        d["mask"],
        cispo=True,
        **_ref_kwargs(kw),
    )
    np.testing.assert_allclose(loss, want, rtol=1e-10, atol=1e-12)


def test_global_normalisation_is_split_invariant(rng):
    """Two micro-batches with the global token count sum to the full-batch loss."""
    d = pg_batch(rng, B=8)
    full, _ = clipped_pg_loss(
        d["logprobs"], d["advantages"], d["mask"], prev_logprobs=d["prev_logprobs"]
    )
    n = int(d["mask"].sum())
    halves = [
        clipped_pg_loss(
            d["logprobs"][s],
            d["advantages"][s],
            d["mask"][s],
            prev_logprobs=d["prev_logprobs"][s],
            num_loss_tokens=n,
        )[0]
        for s in (slice(0, 4), slice(4, 8))
    ]
    np.testing.assert_allclose(sum(halves), full, rtol=1e-12)


def test_large_log_ratios_stay_finite():
    torch = pytest.importorskip("torch")
    lp = torch.tensor(
        [[-0.1, -300.0, -2.0], [-1.0, -1.0, -80.0]], dtype=torch.float32, requires_grad=True
    )
    prev = torch.tensor([[-250.0, -0.1, -2.0], [-90.0, -1.0, -1.0]])
    gen = torch.tensor([[-0.1, -400.0, -2.0], [-1.0, -1.0, -1.0]])
    refl = torch.tensor([[-0.5, -0.5, -200.0], [-1.0, -100.0, -1.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = torch.tensor([1.0, -1.0])
    for kw in (
        {},
        {"dual_clip_c": 3.0},
        {"sequence_level_ratio": True, "agg": "seq-mean-token-mean"},
    ):
        loss, m = clipped_pg_loss(
            lp,
            adv,
            mask,
            prev_logprobs=prev,
            gen_logprobs=gen,
            ref_logprobs=refl,
            kl_beta=0.1,
            is_correction=True,
            is_ratio_max=2.0,
            **kw,
        )
        (g,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(loss), kw
        assert torch.isfinite(g).all(), kw
        assert all(torch.isfinite(torch.as_tensor(v)) for v in m.values())
    loss, _ = cispo_loss(lp, adv, mask, prev_logprobs=prev, ref_logprobs=refl, kl_beta=0.1)
    (g,) = torch.autograd.grad(loss, lp)
    assert torch.isfinite(g).all()


def test_masked_positions_get_no_gradient(rng):
    torch = pytest.importorskip("torch")
    d = pg_batch(rng)
    lp = torch.tensor(d["logprobs"], requires_grad=True)
    loss, _ = clipped_pg_loss(
        lp,
        torch.tensor(d["advantages"]),
        torch.tensor(d["mask"]),
        prev_logprobs=torch.tensor(d["prev_logprobs"]),
        ref_logprobs=torch.tensor(d["ref_logprobs"]),
        kl_beta=0.1,
    )
    loss.backward()
    assert torch.all(lp.grad[~torch.tensor(d["mask"])] == 0)


def test_on_policy_gradient_is_reinforce(rng):
    """prev_logprobs=None: ratio 1, gradient −A/N on every loss token."""
    torch = pytest.importorskip("torch")
    d = pg_batch(rng)
    lp = torch.tensor(d["logprobs"], requires_grad=True)
    mask = torch.tensor(d["mask"])
    loss, m = clipped_pg_loss(lp, torch.tensor(d["advantages"]), mask)
    loss.backward()
    want = -d["advantages"][:, None] * d["mask"] / d["mask"].sum()
    np.testing.assert_allclose(lp.grad.numpy(), want, rtol=1e-12, atol=1e-14)
    assert float(m["clip_fraction"]) == 0.0


@pytest.mark.parametrize("case", ["ppo", "dual_clip", "kl_k3", "gspo", "tis", "seq_mask_tis"])
def test_gradcheck(case, rng):
    torch = pytest.importorskip("torch")
    d = pg_batch(rng, B=4, T=5, spread=0.4 if case != "gspo" else 1e-3)
    t = {k: torch.tensor(v) for k, v in d.items()}
    lp = t.pop("logprobs").requires_grad_()
    mask, adv = t.pop("mask"), t.pop("advantages")
    kw = CASES[case]
    assert torch.autograd.gradcheck(
        lambda x: clipped_pg_loss(x, adv, mask, **t, **kw)[0], (lp,), eps=1e-7
    )


def test_cispo_gradient_is_clipped_weight_times_advantage(rng):
    """CISPO's weight is stop-gradient (so gradcheck does not apply): ∇ℓ = −r̂·A·m / N."""
    torch = pytest.importorskip("torch")
    d = pg_batch(rng, spread=0.5)
    lp = torch.tensor(d["logprobs"], requires_grad=True)
    mask = torch.tensor(d["mask"])
    loss, m = cispo_loss(
        lp,
        torch.tensor(d["advantages"]),
        mask,
        prev_logprobs=torch.tensor(d["prev_logprobs"]),
        eps_low=0.2,
        eps_high=0.2,
    )
    loss.backward()
    r = np.exp(np.clip(d["logprobs"] - d["prev_logprobs"], -20, 20))
    r_hat = np.clip(r, 0.8, 1.2)
    want = -r_hat * d["advantages"][:, None] * d["mask"] / d["mask"].sum()
    np.testing.assert_allclose(lp.grad.numpy(), want, rtol=1e-10, atol=1e-12)
    assert 0 < float(m["clip_fraction"]) < 1


def test_importance_weight_metrics(rng):
    d = pg_batch(rng, spread=0.6)
    w, m = importance_weights(
        d["prev_logprobs"], d["gen_logprobs"], d["mask"], kind="tis", ratio_max=1.1
    )
    raw = np.exp(d["prev_logprobs"] - d["gen_logprobs"])[d["mask"]]
    np.testing.assert_allclose(m["is_weight_mean"], raw.mean())
    np.testing.assert_allclose(m["is_weight_max"], raw.max())
    np.testing.assert_allclose(m["is_truncated_fraction"], (raw > 1.1).mean())
    assert w.max() <= 1.1
    assert np.all(w[~d["mask"]] == 0)
    with pytest.raises(ValueError, match="needs ratio_max"):
        importance_weights(d["prev_logprobs"], d["gen_logprobs"], d["mask"], kind="icepop")


def test_mismatch_metrics(rng):
    d = pg_batch(rng)
    _, m = clipped_pg_loss(
        d["logprobs"],
        d["advantages"],
        d["mask"],
        prev_logprobs=d["prev_logprobs"],
        gen_logprobs=d["gen_logprobs"],
    )
    diff = np.abs(d["prev_logprobs"] - d["gen_logprobs"])[d["mask"]]
    np.testing.assert_allclose(m["logprob_mismatch_mean"], diff.mean())
    np.testing.assert_allclose(m["logprob_mismatch_max"], diff.max())


def test_policy_loss_fits_lossfn_protocol(rng):
    from dockyard.core.config import MasterConfig

    d = pg_batch(rng)
    cfg = MasterConfig.model_validate(
        {"loss_fn": {"ratio_clip_max": 0.28, "reference_policy_kl_penalty": 0.1}}
    )
    fn = PolicyLoss.from_config(cfg.loss_fn)
    batch = {
        "advantages": d["advantages"],
        "loss_mask": d["mask"],
        "prev_logprobs": d["prev_logprobs"],
        "ref_logprobs": d["ref_logprobs"],
        "num_loss_tokens": int(d["mask"].sum()),
    }
    loss, _ = fn(d["logprobs"], batch)
    want, _ = clipped_pg_loss(
        d["logprobs"],
        d["advantages"],
        d["mask"],
        prev_logprobs=d["prev_logprobs"],
        ref_logprobs=d["ref_logprobs"],
        eps_high=0.28,
        kl_beta=0.1,
    )
    np.testing.assert_allclose(loss, want)
    with pytest.raises(ValueError, match="needs gen_logprobs"):
        PolicyLoss(options={"is_correction": True})(d["logprobs"], batch)
    with pytest.raises(KeyError, match="did you mean"):
        PolicyLoss(name="clipped_p")


def test_half_precision_logprobs_computed_in_float32(rng):
    """bf16 logprobs over many tokens: the token count and sums stay exact (fp32 inside)."""
    torch = pytest.importorskip("torch")
    B, T = 8, 512
    lp = torch.full((B, T), -1.0, dtype=torch.bfloat16, requires_grad=True)
    adv = torch.ones(B)
    loss, m = clipped_pg_loss(lp, adv, torch.ones(B, T, dtype=torch.bool))
    assert loss.dtype == torch.float32
    assert float(m["num_tokens"]) == B * T
    assert loss.item() == -1.0
    loss.backward()
    assert lp.grad.dtype == torch.bfloat16
