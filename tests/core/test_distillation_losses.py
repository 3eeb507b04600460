"""Top-k reverse KL against a float64 reference, the ``kl_type`` option, and the trainer's
``LossFn`` of the distillation loss (what it reads from the micro-batch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dockyard.core.config import config_from_dict
from dockyard.core.rl import (
    DistillationLoss,
    OnPolicyDistillationLoss,
    topk_forward_kl,
    topk_reverse_kl,
)


def _case(seed: int = 0, B: int = 2, T: int = 3, V: int = 11, k: int = 4):
    rng = np.random.default_rng(seed)
    zs = rng.normal(size=(B, T, V))
    zt_full = rng.normal(size=(B, T, V))
    idx = np.argsort(-zt_full, axis=-1)[..., :k]
    zt = np.take_along_axis(zt_full, idx, -1)
    mask = np.array([[True, True, False], [True, False, True]])
    return zs, zt, idx, mask


def test_topk_reverse_kl_matches_a_float64_reference() -> None:
    zs, zt, idx, mask = _case()
    tau = 1.5
    loss, metrics = topk_reverse_kl(zs, zt, idx, mask, temperature=tau)
    total, n = 0.0, 0
    for b in range(2):
        for t in range(3):
            if not mask[b, t]:
                continue
            s = [zs[b, t, i] / tau for i in idx[b, t]]
            p = [v / tau for v in zt[b, t]]
            ls, lp = (math.log(sum(math.exp(v) for v in x)) for x in (s, p))
            total += sum(
                math.exp(si - ls) * ((si - ls) - (pi - lp)) for si, pi in zip(s, p, strict=True)
            )
            n += 1
    assert loss == pytest.approx(total / n, rel=1e-10)
    assert metrics["distill_kl"] == loss
    assert topk_reverse_kl(zs, zt, idx, mask, temperature=tau, num_loss_tokens=10)[
        0
    ] == pytest.approx(total / 10, rel=1e-10)
    # the student's logits at the teacher's ids equal to the teacher's: 0, whatever elsewhere
    same = zs.copy()
    np.put_along_axis(same, idx, zt, -1)
    assert abs(topk_reverse_kl(same, zt, idx, mask)[0]) < 1e-12
    assert topk_forward_kl(same, zt, idx, mask)[0] > 1e-3  # forward sees the mass outside


def test_kl_type_picks_the_direction_from_the_config() -> None:
    zs, zt, idx, mask = _case(1)
    base = {"type": "distillation", "teacher_model_name": "/t", "topk": 3}
    fwd = DistillationLoss.from_config(config_from_dict({"loss_fn": base}).loss_fn)
    rev_cfg = config_from_dict({"loss_fn": {**base, "kl_type": "reverse"}}).loss_fn
    rev = DistillationLoss.from_config(rev_cfg)
    assert (fwd.kl_type, rev.kl_type) == ("forward", "reverse")
    want_f, _ = topk_forward_kl(zs, zt[..., :3], idx[..., :3], mask)
    want_r, _ = topk_reverse_kl(zs, zt[..., :3], idx[..., :3], mask)
    assert fwd(zs, zt, idx, mask)[0] == pytest.approx(want_f, rel=1e-12)
    assert rev(zs, zt, idx, mask)[0] == pytest.approx(want_r, rel=1e-12)
    with pytest.raises(ValueError, match="kl_type"):
        config_from_dict({"loss_fn": {**base, "kl_type": "mixed"}})


def test_the_loss_fn_reads_the_teachers_topk_from_the_micro_batch() -> None:
    zs, zt, idx, mask = _case(2)
    fn = OnPolicyDistillationLoss(DistillationLoss(topk=4, temperature=2.0))
    assert fn.teacher_topk == 4
    batch = {"student_logits": zs, "teacher_topk_logits": zt, "teacher_topk_indices": idx,
             "loss_mask": mask, "num_loss_tokens": 7.0}  # fmt: skip
    got, metrics = fn(np.zeros(mask.shape), batch)
    want, _ = topk_forward_kl(zs, zt, idx, mask, temperature=2.0, num_loss_tokens=7.0)
    assert got == pytest.approx(want, rel=1e-12)
    assert set(metrics) == {"distill_kl", "loss"}
    # the metric is this micro-batch's own token mean (the trainer averages it by tokens)
    mean, _ = topk_forward_kl(zs, zt, idx, mask, temperature=2.0)
    assert metrics["distill_kl"] == pytest.approx(mean, rel=1e-12)
    cfg = config_from_dict({"loss_fn": {"type": "distillation", "teacher_model_name": "/t"}})
    assert OnPolicyDistillationLoss.from_config(cfg.loss_fn) == OnPolicyDistillationLoss(
        DistillationLoss(topk=64, temperature=1.0)
    )
