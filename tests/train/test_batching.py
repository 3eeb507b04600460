"""Groups -> batch: every option changes what the trainer sees (the same code serves sync and
async runs: the driver builds every batch with ``build_batch``)."""

from __future__ import annotations

import numpy as np

from dockyard.core.experience import Group
from dockyard.train.batching import BatchOptions, build_batch, informative_groups


def test_grpo_advantages_and_masks(group_factory, traj_factory) -> None:
    b = build_batch([group_factory("a", [1, 0, 0, 1])], BatchOptions())
    adv = b.advantages[:, -1]
    assert adv[0] > 0 > adv[1]
    assert np.allclose(adv[0], -adv[1])
    assert not b.loss_mask[:, :3].any()  # prompt tokens never carry loss
    assert b.loss_mask[:, 3:].all()
    assert np.all(b.advantages[~b.loss_mask] == 0)


def test_infra_errors_are_masked_not_scored_zero(group_factory, traj_factory) -> None:
    g = Group(
        "a",
        [traj_factory("a", 1.0), traj_factory("a", 0.0), traj_factory("a", 0.0, infra=True)],
        metadata={"uid": "a"},
    )
    b = build_batch([g], BatchOptions())
    assert not b.loss_mask[2].any()
    # the baseline ignores the masked sample: mean of (1, 0), not of (1, 0, 0)
    clean = build_batch([group_factory("b", [1, 0])], BatchOptions())
    assert np.allclose(b.advantages[0, -1], clean.advantages[0, -1])


def test_overlong_filtering_masks_truncated_samples(group_factory, traj_factory) -> None:
    def groups():
        return [
            Group(
                "a",
                [traj_factory("a", 1.0), traj_factory("a", 0.0, finish="length")],
                metadata={"uid": "a"},
            )
        ]

    off = build_batch(groups(), BatchOptions(overlong_filtering=False))
    on = build_batch(groups(), BatchOptions(overlong_filtering=True))
    assert off.loss_mask[1].any()
    assert not on.loss_mask[1].any()
    assert on.loss_mask[0].any()


def test_reward_shaping_penalises_long_responses(group_factory, traj_factory) -> None:
    def groups():
        return [
            Group(
                "a",
                [traj_factory("a", 1.0, resp_len=2), traj_factory("a", 1.0, resp_len=10)],
                metadata={"uid": "a"},
            )
        ]

    opts = {"max_response_length": 10, "overlong_buffer_length": 4, "overlong_penalty": 1.0}
    off = build_batch(groups(), BatchOptions(reward_shaping=False, **opts))
    on = build_batch(groups(), BatchOptions(reward_shaping=True, **opts))
    assert np.all(off.advantages == 0)  # equal rewards: nothing to learn
    assert on.extras["reward"][1] < on.extras["reward"][0] == 1.0
    a0, a1 = on.advantages[0][on.loss_mask[0]], on.advantages[1][on.loss_mask[1]]
    assert np.all(a0 > 0)
    assert np.all(a1 < 0)


def test_dynamic_sampling_drops_all_equal_groups(group_factory, traj_factory) -> None:
    groups = [group_factory("a", [1, 1]), group_factory("b", [1, 0]), group_factory("c", [0, 0])]
    keep = informative_groups(groups)
    assert keep.tolist() == [False, True, False]
    kept = [g for g, k in zip(groups, keep, strict=True) if k]
    b_all, b_kept = build_batch(groups, BatchOptions()), build_batch(kept, BatchOptions())
    assert b_all.shape[0] == 6
    assert b_kept.shape[0] == 2
    assert np.count_nonzero(b_kept.advantages[:, -1]) == 2


def test_masked_samples_are_reported_with_their_reasons(traj_factory) -> None:
    from dockyard.train.metrics import infra_reasons, infra_report

    def masked(why: dict) -> object:
        t = traj_factory("a", 0.0, infra=True)
        t.metadata.update(why)
        return t

    g = Group(
        "a",
        [
            traj_factory("a", 1.0),
            masked({"infra_reason": "sandbox   unreachable:\nconnection refused"}),
            masked({"infra_reason": "sandbox unreachable: connection refused"}),
            masked({"error": "TimeoutError: scoring took too long"}),
            masked({}),
        ],
        metadata={"uid": "a"},
    )
    assert infra_reasons([g]) == [
        ("sandbox unreachable: connection refused", 2),
        ("TimeoutError: scoring took too long", 1),
        ("no reason given", 1),
    ]
    line = infra_report([g], step=7, shown=2)
    assert line is not None
    assert line.startswith("dockyard: step 7: 4 of 5 samples masked")
    assert "sandbox unreachable: connection refused (×2)" in line
    assert line.endswith("1 more reasons")
    clean = Group("b", [traj_factory("b", 1.0)], metadata={"uid": "b"})
    assert infra_report([clean], step=1) is None


def test_gdpo_normalises_each_reward_component_and_uses_only_the_named_ones(traj_factory) -> None:
    from dataclasses import replace

    from dockyard.core.rl.advantages.gdpo import gdpo_advantages

    parts = {"reward/tests": [1.0, 0.0, 1.0, 0.0], "reward/format": [0.0, 0.0, 1.0, 1.0]}

    def groups():
        trajs = [
            replace(traj_factory("a", 0.0), rewards={k: v[i] for k, v in parts.items()})
            for i in range(4)
        ]
        return [Group("a", trajs, metadata={"uid": "a"})]

    def adv(**options):
        opts = BatchOptions(estimator="gdpo", estimator_options=options)
        return build_batch(groups(), opts).advantages[:, -1]

    matrices = {k: np.array([v]) for k, v in parts.items()}
    assert np.allclose(adv(), gdpo_advantages(matrices)[0], atol=1e-6)
    only_tests = adv(components=["reward/tests"])
    assert np.allclose(only_tests, gdpo_advantages(matrices, components=["reward/tests"])[0])
    assert not np.allclose(only_tests, adv())  # the format component changed the advantages


def test_grammar_masks_travel_from_trajectories_into_the_batch_and_its_slices(traj_factory) -> None:
    """Each constrained trajectory's allowed sets land in the batch's one table at its own
    rows (offset), padding and unconstrained trajectories at -1; the GRPO driver's row slices
    keep them aligned."""
    from dockyard.core.experience import AllowedTokens
    from dockyard.train.batching import row_slices

    def sets(words: list[int], n_prompt: int) -> AllowedTokens:
        part = AllowedTokens.from_bitmasks(np.array([[w] for w in words], np.int32))
        return AllowedTokens.concat([(n_prompt, None), (len(words), part)])  # type: ignore[return-value]

    short, long_, free = (traj_factory("g", r, resp_len=n) for r, n in ((1, 2), (0, 4), (1, 3)))
    short.allowed = sets([0b10, 0b100], 3)
    long_.allowed = sets([0b1, 0b1, 0b110, 0b1000], 3)
    b = build_batch([Group("g", [short, long_, free])], BatchOptions())
    assert b.allowed is not None
    assert b.allowed.rows.shape == b.input_ids.shape == (3, 7)
    assert (b.allowed.rows[:, :3] == -1).all()  # prompts
    assert (b.allowed.rows[0, 5:] == -1).all()  # padding
    assert (b.allowed.rows[2] == -1).all()  # an unconstrained trajectory
    words = b.allowed.table[b.allowed.rows[:2, 3:], 0]
    assert words[0, :2].tolist() == [0b10, 0b100]
    assert words[1].tolist() == [0b1, 0b1, 0b110, 0b1000]
    first, second = row_slices(b, 2)
    assert first.allowed is not None
    assert second.allowed is not None
    np.testing.assert_array_equal(
        np.concatenate([first.allowed.rows, second.allowed.rows]), b.allowed.rows
    )
    assert build_batch([Group("g", [free])], BatchOptions()).allowed is None
