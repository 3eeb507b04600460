"""Every ``loss_fn`` config builds its loss with the config's values: ``from_config(cfg)`` (and
``loss_from_config``) gives a loss whose result is the loss function called with those options;
GDPO's ``reward_components`` choose the components it normalises."""

from __future__ import annotations

import numpy as np
import pytest

from dockyard.core.config import config_from_dict
from dockyard.core.rl import (
    BradleyTerryLoss,
    DistillationLoss,
    MaskedNLLLoss,
    PolicyLoss,
    PreferenceLoss,
    bradley_terry_loss,
    compute_advantages,
    loss_from_config,
    masked_nll,
    preference_loss,
    topk_forward_kl,
)

PREF = {
    "beta": 0.3,
    "label_smoothing": 0.1,
    "dpop_lambda": 7.0,
    "rdpo_alpha": 0.2,
    "simpo_gamma": 0.9,
    "orpo_lambda": 0.4,
    "sft_weight": 0.5,
}


def _loss_cfg(**loss_fn):
    return config_from_dict({"loss_fn": loss_fn}).loss_fn


@pytest.fixture
def pairs():
    rng = np.random.default_rng(0)
    pc, pr, rc, rr = (rng.normal(-20, 3, 6) for _ in range(4))
    lc, lr = rng.integers(5, 30, 6), rng.integers(5, 30, 6)
    return pc, pr, rc, rr, lc, lr


@pytest.mark.parametrize("variant", ["dpo", "cdpo", "ipo", "dpop", "rdpo", "simpo", "orpo"])
def test_preference_losses_take_every_key(variant, pairs) -> None:
    pc, pr, rc, rr, lc, lr = pairs
    cfg = _loss_cfg(type=variant, **PREF)
    loss = PreferenceLoss.from_config(cfg)
    assert loss == loss_from_config(cfg)
    got, metrics = loss(pc, pr, rc, rr, chosen_lengths=lc, rejected_lengths=lr)
    want, _ = preference_loss(
        variant, pc, pr, rc, rr, chosen_lengths=lc, rejected_lengths=lr, **PREF
    )
    np.testing.assert_allclose(got, want, rtol=1e-12)
    default, _ = PreferenceLoss(variant)(pc, pr, rc, rr, chosen_lengths=lc, rejected_lengths=lr)
    assert not np.isclose(got, default)  # the keys change the loss
    assert set(metrics) == {"preference_accuracy", "preference_margin", "loss"}


def test_distillation_takes_topk_and_temperature() -> None:
    rng = np.random.default_rng(1)
    student = rng.normal(size=(2, 5, 11))
    teacher = np.sort(rng.normal(size=(2, 5, 6)), axis=-1)[..., ::-1]  # sorted, largest first
    idx = np.stack([rng.permutation(11)[:6] for _ in range(10)]).reshape(2, 5, 6)
    mask = rng.random((2, 5)) > 0.3
    cfg = _loss_cfg(type="distillation", teacher_model_name="/t", topk=4, temperature=2.0)
    loss = DistillationLoss.from_config(cfg)
    assert loss == loss_from_config(cfg) == DistillationLoss(topk=4, temperature=2.0)
    got, _ = loss(student, teacher, idx, mask)
    want, _ = topk_forward_kl(student, teacher[..., :4], idx[..., :4], mask, temperature=2.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    all_six, _ = topk_forward_kl(student, teacher, idx, mask, temperature=2.0)
    assert not np.isclose(got, all_six)
    with pytest.raises(ValueError, match="topk=8 but the teacher gave only 6"):
        DistillationLoss(topk=8)(student, teacher, idx, mask)


@pytest.mark.parametrize("use_margin", [True, False])
def test_bradley_terry_takes_use_margin(use_margin: bool) -> None:
    rng = np.random.default_rng(2)
    c, r, m = rng.normal(size=8), rng.normal(size=8), rng.random(8)
    cfg = _loss_cfg(type="bradley_terry", use_margin=use_margin)
    loss = BradleyTerryLoss.from_config(cfg)
    assert loss == loss_from_config(cfg)
    got, _ = loss(c, r, m)
    want, _ = bradley_terry_loss(c, r, m if use_margin else None)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize(
    ("token_level", "agg"), [(True, "token-mean"), (False, "seq-mean-token-mean")]
)
def test_nll_takes_token_level_loss(token_level: bool, agg: str) -> None:
    rng = np.random.default_rng(3)
    lp, mask = -rng.random((3, 7)), rng.random((3, 7)) > 0.4
    cfg = _loss_cfg(type="nll", token_level_loss=token_level)
    loss = MaskedNLLLoss.from_config(cfg)
    assert loss == loss_from_config(cfg) == MaskedNLLLoss(agg=agg)
    got, _ = loss(lp, {"loss_mask": mask})
    np.testing.assert_allclose(got, masked_nll(lp, mask, agg=agg)[0], rtol=1e-12)


def test_policy_gradient_configs_build_a_policy_loss() -> None:
    loss = loss_from_config(_loss_cfg(type="cispo", ratio_clip_max=0.3))
    assert isinstance(loss, PolicyLoss)
    assert (loss.name, dict(loss.options or {})["eps_high"]) == ("cispo", 0.3)


def test_gdpo_uses_only_the_named_components() -> None:
    rng = np.random.default_rng(4)
    rewards = {k: rng.normal(size=(4, 3)) for k in ("reward/tests", "reward/format", "reward/len")}
    valid = np.ones((4, 3), dtype=bool)
    adv = config_from_dict(
        {"grpo": {"adv_estimator": {"name": "gdpo", "reward_components": ["reward/tests"]}}}
    ).grpo.adv_estimator
    opts = adv.estimator_options()
    assert opts == {"components": ["reward/tests"]}
    got = compute_advantages(rewards, valid, estimator="gdpo", **opts)
    only = {"reward/tests": rewards["reward/tests"]}
    np.testing.assert_allclose(got, compute_advantages(only, valid, estimator="gdpo"))
    every = compute_advantages(rewards, valid, estimator="gdpo", components=None)
    assert not np.allclose(got, every)
    with pytest.raises(KeyError, match=r"reward_components names 'reward/oops'"):
        compute_advantages(rewards, valid, estimator="gdpo", components=["reward/oops"])
    with pytest.raises(ValueError, match="must be a mapping"):
        compute_advantages(np.stack(list(rewards.values()), -1), valid, estimator="gdpo", **opts)
