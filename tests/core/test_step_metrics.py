"""A loss's micro-batch metrics combine into the step's: means weighted by loss tokens,
extremes (``*_max`` / ``*_min``) as the extreme, ``loss`` summed — over micro-batches and ranks."""

from __future__ import annotations

import pytest

from dockyard.core.rl.metrics import add_metric, final_metrics, merge_metrics


def _acc(parts: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    acc: dict[str, float] = {}
    for metrics, weight in parts:
        for key, value in metrics.items():
            add_metric(acc, key, value, weight)
    return acc


def test_means_extremes_and_the_loss() -> None:
    acc = _acc(
        [
            ({"loss": 0.5, "clip_fraction": 0.1, "logprob_mismatch_max": 0.2, "w_min": 0.9}, 30),
            ({"loss": 0.25, "clip_fraction": 0.4, "logprob_mismatch_max": 0.7, "w_min": 0.5}, 10),
        ]
    )
    out = final_metrics(acc, 40)
    assert out["loss"] == pytest.approx(0.75)
    assert out["clip_fraction"] == pytest.approx((0.1 * 30 + 0.4 * 10) / 40)
    assert out["logprob_mismatch_max"] == 0.7  # the worst token, not a mean of maxima
    assert out["w_min"] == 0.5


def test_ranks_merge_as_one_accumulator() -> None:
    a = _acc([({"loss": 1.0, "m": 2.0, "d_max": 3.0}, 5)])
    b = _acc([({"loss": 2.0, "m": 4.0, "d_max": 1.0}, 15)])
    both = final_metrics(merge_metrics([a, b]), 20)
    one = final_metrics(_acc([({"loss": 1.0, "m": 2.0, "d_max": 3.0}, 5),
                              ({"loss": 2.0, "m": 4.0, "d_max": 1.0}, 15)]), 20)  # fmt: skip
    assert both == pytest.approx(one)
    assert both["m"] == pytest.approx((2 * 5 + 4 * 15) / 20)


def test_a_micro_batch_without_loss_tokens_leaves_a_mean_alone() -> None:
    out = final_metrics(_acc([({"m": 0.3}, 10), ({"m": 99.0}, 0)]), 10)
    assert out["m"] == pytest.approx(0.3)
