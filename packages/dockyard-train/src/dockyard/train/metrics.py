"""Per-step metrics of the GRPO loop (flat ``{name: float}``, names are stable log keys).

=========================  ===============================================================
``reward/mean|std``        scalar reward over valid trajectories; ``reward/<c>/mean`` per
                           named component (``reward/tests``...)
``pass_rate``              fraction of valid trajectories that solved their task
``response_length/mean``   policy tokens per trajectory (``/max``; ``truncated_fraction``)
``infra_error_fraction``   trajectories masked because the reward could not be computed
                           (the driver also prints why: :func:`infra_report`)
``staleness/mean|max``     age = trainer step − oldest policy version of a trajectory;
``staleness/hist_<k>``     the histogram of ages (k = 0..max_age); ``in_flight_fraction``:
                           trajectories whose tokens span several policy versions
``train/*``                the loss's metrics (clip fraction, KL, IS weights...), grad norm
``logprob_mismatch/*``     |log π − log π_gen| over loss tokens (train vs generation), as the
                           loss measured it; ``is_weight/*`` with IS correction on
``tokens_per_s/gen``       tokens the engines returned since the previous step's log ÷ the
                           wall seconds in that window during which at least one generation
                           request was outstanding (``collector/gen_wall_s``: the union of
                           the requests' intervals, never their summed latencies — groups are
                           generated concurrently). The engines' throughput while busy; times
                           ``collector/gen_busy_fraction`` (busy share of the window's wall
                           time) it is the throughput over the whole window
``tokens_per_s/train``     tokens of the step's batch (prompts and completions, every rank
                           together) ÷ the wall seconds of its optimizer step as the driver saw
                           them (``time/train_s``); ``train/tokens_per_s`` is the worker's
                           own figure (rank 0's compute time, no transfers)
``collector/*``            ``gen_tokens``, ``gen_wall_s``, ``gen_busy_fraction`` (above);
                           ``gen_latency_s`` the summed per-group generation latencies
                           (÷ ``groups``: the mean latency); ``env_s``, ``group_s`` summed per
                           group; ``requeued``, ``engine_failures``, ``errors``;
                           ``prefix_cache_hit_rate`` the samples' prompt tokens the engines
                           reused from a prefix cache (vLLM's, the transformers engine's
                           group prefill), of all their prompt tokens
``val/*``                  ``pass_rate``, ``reward``, ``samples`` of a validation
                           (``grpo.val_samples_per_prompt`` samples per held-out task at
                           ``grpo.val_temperature``); logged at the step whose weights it
                           measured: 0 (before training), every ``val_period``, the last (``val_at_end``)
``time/*``                 wall-clock split: waiting for generation, logprobs (the reference
                           policy's, β > 0), training, weight sync, checkpoint, validation;
                           ``step_s`` the whole step; ``since_process_start_s`` when it ended
``startup/*``              the first step's row only: seconds of each start-up phase (``ray``,
                           ``trainer``, ``engines``, ``sandbox``: each fleet's own, started
                           together; ``fleets`` all of them; ``data``; ``validation``)
=========================  ===============================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dockyard.core.experience import Group
from dockyard.train.batching import passed, response_length


def rollout_metrics(groups: list[Group], step: int, max_age: int) -> dict[str, float]:
    trajs = [t for g in groups for t in g.trajectories]
    valid = [t for t in trajs if not t.infra_error]
    out: dict[str, float] = {
        "groups": float(len(groups)),
        "trajectories": float(len(trajs)),
        "infra_error_fraction": 1.0 - len(valid) / max(len(trajs), 1),
    }
    if valid:
        r = np.array([t.reward for t in valid])
        out["reward/mean"] = float(r.mean())
        out["reward/std"] = float(r.std())
        comps = sorted({k for t in valid for k in t.rewards})
        for c in comps:
            v = np.array([t.rewards.get(c, 0.0) for t in valid])
            out[f"{c}/mean"] = float(v.mean())
            out[f"{c}/std"] = float(v.std())
        out["pass_rate"] = float(np.mean([passed(t) for t in valid]))
        # a tool environment's invalid actions (bad JSON, unknown tools, schema errors, turns
        # without a call, calls the token budget cut) per trajectory
        invalid = [t.metadata["invalid_actions"] for t in valid if "invalid_actions" in t.metadata]
        if invalid:
            out["invalid_actions/mean"] = float(np.mean(invalid))
            out["invalid_actions/max"] = float(np.max(invalid))
    lengths = np.array([response_length(t) for t in trajs]) if trajs else np.zeros(1)
    out["response_length/mean"] = float(lengths.mean())
    out["response_length/max"] = float(lengths.max())
    out["truncated_fraction"] = float(np.mean([t.finish_reason == "length" for t in trajs] or [0]))
    ages = np.array([step - t.min_version for t in trajs]) if trajs else np.zeros(1)
    out["staleness/mean"] = float(ages.mean())
    out["staleness/max"] = float(ages.max())
    for k in range(max_age + 1):
        out[f"staleness/hist_{k}"] = float(np.sum(ages == k))
    spans = [len(set(t.policy_versions[t.policy_mask].tolist())) > 1 for t in trajs]
    out["in_flight_fraction"] = float(np.mean(spans or [0]))
    # scoring runs concurrently with generation, so these are per-sample latencies, not a share
    # of the step's wall-clock (``time/*_s`` of the driver's own phases are)
    env_s = np.array([t.metadata.get("env_s", 0.0) for t in trajs] or [0.0])
    out["sandbox/latency_mean_s"] = float(env_s.mean())
    out["sandbox/latency_max_s"] = float(env_s.max())
    return out


def infra_reasons(groups: list[Group], width: int = 160) -> list[tuple[str, int]]:
    """Why the masked (``infra_error``) trajectories of ``groups`` could not be scored: each
    distinct reason (an environment's ``infra_reason``, or the exception scoring raised) with
    its count, most frequent first."""
    counts: dict[str, int] = {}
    for g in groups:
        for t in g.trajectories:
            if t.infra_error:
                why = str(
                    t.metadata.get("infra_reason") or t.metadata.get("error") or "no reason given"
                )
                why = " ".join(why.split())
                why = why if len(why) <= width else why[: width - 1] + "…"
                counts[why] = counts.get(why, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def infra_report(groups: list[Group], step: int, shown: int = 3) -> str | None:
    """One log line for the masked samples of a step (None when there are none)."""
    reasons = infra_reasons(groups)
    if not reasons:
        return None
    n = sum(c for _, c in reasons)
    total = sum(len(g.trajectories) for g in groups)
    listed = "; ".join(f"{why} (×{c})" for why, c in reasons[:shown])
    more = f"; {len(reasons) - shown} more reasons" if len(reasons) > shown else ""
    return (
        f"dockyard: step {step}: {n} of {total} samples masked (infra_error: their reward could "
        f"not be computed, so they are left out, not scored 0): {listed}{more}"
    )


def mismatch_metrics(tm: dict[str, Any]) -> dict[str, float]:
    """Train-vs-generation logprob mismatch over loss tokens, from the train step's metrics
    (the loss measures |log π − log π_gen| in its own forward: π_prev is the policy trained):
    ``logprob_mismatch/mean|max``, and ``is_weight/mean|max|min`` when the loss's
    importance-sampling correction is on."""
    names = {
        "logprob_mismatch/mean": "logprob_mismatch_mean",
        "logprob_mismatch/max": "logprob_mismatch_max",
        "is_weight/mean": "is_weight_mean",
        "is_weight/max": "is_weight_max",
        "is_weight/min": "is_weight_min",
    }
    return {key: float(tm[name]) for key, name in names.items() if name in tm}


def train_metrics(m: dict[str, Any]) -> dict[str, float]:
    return {f"train/{k}": float(v) for k, v in m.items() if isinstance(v, int | float | np.number)}
