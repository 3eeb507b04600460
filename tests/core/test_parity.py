"""numpy = torch = JAX: every function gives the same values in each framework, returns the
input's array type, and torch and JAX gradients agree."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import dockyard.core.rl as rl

sys.path.insert(0, str(Path(__file__).parent))
from conftest import FRAMEWORKS, convert, pg_batch, to_numpy, tol

pytest.importorskip("torch")
pytest.importorskip("jax")


def _check_type(out, fw):
    mod = type(out).__module__
    assert {"numpy": "numpy", "torch": "torch", "jax": "jax"}[fw] in mod, (fw, type(out))


def _run(fn, arrays: dict, kwargs: dict, fw: str):
    conv = {k: convert(v, fw) for k, v in arrays.items()}
    return fn(**conv, **kwargs)


def _compare(fn, arrays, kwargs, pick=lambda o: o):
    base = pick(_run(fn, arrays, kwargs, "numpy"))
    for fw in FRAMEWORKS[1:]:
        out = pick(_run(fn, arrays, kwargs, fw))
        _check_type(out, fw)
        np.testing.assert_allclose(
            to_numpy(out), to_numpy(base), **tol(fw), err_msg=f"{fn.__name__} {fw}"
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"estimator": "grpo"},
        {"estimator": "grpo", "leave_one_out": True},
        {"estimator": "dr_grpo", "clip": 0.5},
        {"estimator": "rloo"},
        {"estimator": "reinforce_plus_plus"},
    ],
)
def test_advantages(kwargs, rng):
    r = rng.integers(0, 3, (5, 4)).astype(float)
    r[0] = 1.0
    valid = rng.random((5, 4)) > 0.2
    _compare(
        lambda rewards, valid: rl.compute_advantages(rewards, valid, **kwargs),
        {"rewards": r, "valid": valid},
        {},
    )


def test_gdpo(rng):
    r = rng.normal(size=(5, 4, 2))
    _compare(lambda rewards: rl.compute_advantages(rewards, estimator="gdpo"), {"rewards": r}, {})


PG = [
    {},
    {"eps_high": 0.28, "dual_clip_c": 2.0, "kl_beta": 0.1},
    {"sequence_level_ratio": True, "agg": "seq-mean-token-mean"},
    {
        "is_correction": True,
        "is_type": "icepop",
        "is_ratio_max": 1.3,
        "is_ratio_min": 0.7,
        "agg": "seq-mean-token-sum",
    },
    {"is_correction": True, "is_type": "seq-mask-tis", "is_ratio_max": 1.1, "is_ratio_min": 0.9},
]


@pytest.mark.parametrize("kwargs", PG)
@pytest.mark.parametrize("loss", ["clipped_pg", "cispo"])
def test_policy_losses_and_grads(kwargs, loss, rng):
    import jax
    import torch

    if loss == "cispo":
        kwargs = {
            k: v for k, v in kwargs.items() if k not in ("dual_clip_c", "sequence_level_ratio")
        }
    fn = rl.POLICY_LOSSES.get(loss)
    d = pg_batch(rng)
    names = ("advantages", "mask", "prev_logprobs", "gen_logprobs", "ref_logprobs")
    arrays = {"logprobs": d["logprobs"], **{k: d[k] for k in names}}
    _compare(fn, arrays, kwargs, pick=lambda o: o[0])
    metrics = {fw: _run(fn, arrays, kwargs, fw)[1] for fw in FRAMEWORKS}
    for k, v in metrics["numpy"].items():
        for fw in FRAMEWORKS[1:]:
            np.testing.assert_allclose(to_numpy(metrics[fw][k]), to_numpy(v), **tol(fw), err_msg=k)

    lp_t = torch.tensor(d["logprobs"], requires_grad=True)
    rest_t = {k: convert(d[k], "torch") for k in names}
    fn(lp_t, **rest_t, **kwargs)[0].backward()
    rest_j = {k: convert(d[k], "jax") for k in names}
    g_j = jax.grad(lambda x: fn(x, **rest_j, **kwargs)[0])(convert(d["logprobs"], "jax"))
    np.testing.assert_allclose(to_numpy(g_j), lp_t.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_kl_and_supervised(rng):
    d = pg_batch(rng)
    for kind in ("k1", "k2", "k3"):
        _compare(
            rl.kl_estimate,
            {"logprobs": d["logprobs"], "ref_logprobs": d["ref_logprobs"], "mask": d["mask"]},
            {"kind": kind},
        )
    _compare(rl.masked_nll, {"logprobs": d["logprobs"], "mask": d["mask"]}, {}, pick=lambda o: o[0])
    zs = rng.normal(size=(2, 3, 9))
    zt = rng.normal(size=(2, 3, 4))
    idx = rng.permuted(np.tile(np.arange(9), (2, 3, 1)), axis=-1)[..., :4]
    _compare(
        rl.topk_forward_kl,
        {"student_logits": zs, "teacher_topk_logits": zt, "teacher_topk_indices": idx},
        {"temperature": 2.0},
        pick=lambda o: o[0],
    )


@pytest.mark.parametrize("variant", ["dpo", "cdpo", "ipo", "dpop", "rdpo", "simpo", "orpo"])
def test_preference(variant, rng):
    B = 5
    lc, lr = rng.integers(3, 20, B).astype(float), rng.integers(3, 20, B).astype(float)
    arrays = {
        "chosen_logps": -lc * rng.uniform(0.5, 2, B),
        "rejected_logps": -lr * rng.uniform(0.5, 2, B),
        "ref_chosen_logps": -lc * rng.uniform(0.5, 2, B),
        "ref_rejected_logps": -lr * rng.uniform(0.5, 2, B),
        "chosen_lengths": lc,
        "rejected_lengths": lr,
    }
    _compare(
        lambda **a: rl.preference_loss(variant, sft_weight=0.1, **a),
        arrays,
        {},
        pick=lambda o: o[0],
    )


def test_shaping(rng):
    lengths = rng.integers(0, 200, 20)
    _compare(
        lambda lengths: rl.overlong_penalty(lengths, max_response_length=128, buffer_length=32),
        {"lengths": lengths},
        {},
    )
    r = rng.integers(0, 2, (6, 4)).astype(float)
    for fw in FRAMEWORKS:
        np.testing.assert_array_equal(
            np.asarray(to_numpy(rl.dynamic_sampling_keep(convert(r, fw)))),
            rl.dynamic_sampling_keep(r),
        )


def test_mixed_frameworks_rejected(rng):
    import torch

    with pytest.raises(TypeError, match="several frameworks"):
        rl.clipped_pg_loss(torch.zeros(2, 3), convert(np.zeros(2), "jax"))
