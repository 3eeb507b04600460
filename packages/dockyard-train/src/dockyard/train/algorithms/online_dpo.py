"""Online DPO: the current policy samples K candidates per prompt, an LLM judge ranks them, and
the best-vs-worst pair of each prompt takes a DPO step (Guo et al. 2024, "Direct Language Model
Alignment from Online AI Feedback"; the loss is any of :mod:`.dpo`'s variants). The new weights
go to the engines and the loop repeats, so every pair comes from the policy being trained.

    ref     = π before its first step (the trainer keeps it: reference logprobs per new pair)
    base    = greedy responses of π_0 to the held-out prompts
    for step in range(1, steps + 1):
        prompts    = next P prompts                       # seeded order, reshuffled per epoch
        candidates = engines.generate(prompts, n=K)       # the policy's vLLM engines
        pairs      = best_vs_worst(judge(candidates))     # failed / tied judgments dropped
        batch      = collate_pairs(pairs, ref(pairs))     # dpo.collate_pairs
        metrics    = trainer.train_step(batch, PreferencePairsLoss(loss))
        push_weights(version=step)                        # the engines now serve π_step
        log(step, metrics + judge/* + online_dpo/*)
        win_rate(step)                                    # every val_period steps, at the end

Ranking: pairwise (``judge.mode``) judges every one of the K(K−1)/2 pairs (both orders unless
``judge.both_orders`` is off) and ranks candidates by their mean preference over the pairs that
were judged; rubric scores each candidate once. Identical texts tie without a request. A prompt
whose judgments all failed, or whose best and worst rank equal, gives no pair (counted:
``online_dpo/dropped_failed``, ``online_dpo/dropped_ties``); a step without any pair trains
nothing. Candidates are sampled with seeds from ``grpo.seed``, the step and the prompt's
place. Pair tokens are the engine's own ids (the response as sampled, its end-of-turn token
included when it stopped there), never a re-tokenisation of text.

Held-out: ``val/win_rate`` (:mod:`.feedback`, shared with RLAIF: the judge's preference for
π_step's greedy responses over π_0's). The prompts, the DPO step, the fleets and the judge's
pre-flight are :mod:`.feedback`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dockyard.core.config import MasterConfig
from dockyard.core.interfaces import SamplingParams
from dockyard.core.rl.preference import PreferenceLoss
from dockyard.train.algorithms.dpo import EncodedPair
from dockyard.train.algorithms.feedback import (
    FeedbackResult,
    Policy,
    StackPolicy,
    judge_problems,
    load_prompt_data,
    load_prompts,
    online_preference,
    prompt_text,
    start_policy,
    win_rate,
)
from dockyard.train.judge import Judge
from dockyard.train.prompts import Messages, PromptRenderer

__all__ = ["OnlineDPOResult", "Policy", "StackPolicy", "best_vs_worst", "config_problems",
           "load_prompt_data", "load_prompts", "online_dpo", "rank", "start_policy",
           "win_rate"]  # fmt: skip


# --------------------------------------------------------------------------- ranking
def rank(judge: Judge, prompts: list[str], candidates: list[list[str]]) -> list[list[float | None]]:
    """Each candidate's standing among its prompt's candidates: the mean preference over its
    judged pairs (pairwise) or its score (rubric); None where nothing about it was judged."""
    if judge.mode == "rubric":
        items = [(p, c) for p, cs in zip(prompts, candidates, strict=True) for c in cs]
        flat = iter(judge.scores(items))
        return [[_float(next(flat)) for _ in cs] for cs in candidates]
    asks: list[tuple[int, int, int]] = []  # (prompt, i, j) pairs that need a request
    for n, cs in enumerate(candidates):
        asks += [(n, i, j) for i in range(len(cs)) for j in range(i + 1, len(cs)) if cs[i] != cs[j]]
    verdicts = judge.compare([(prompts[n], candidates[n][i], candidates[n][j]) for n, i, j in asks])
    wins = [[[] for _ in cs] for cs in candidates]
    for n, cs in enumerate(candidates):  # identical texts tie
        for i in range(len(cs)):
            for j in range(i + 1, len(cs)):
                if cs[i] == cs[j]:
                    wins[n][i].append(0.5)
                    wins[n][j].append(0.5)
    for (n, i, j), v in zip(asks, verdicts, strict=True):
        if v.preference is not None:
            wins[n][i].append(v.preference)
            wins[n][j].append(1.0 - v.preference)
    return [[float(np.mean(w)) if w else None for w in ws] for ws in wins]


def _float(x: int | None) -> float | None:
    return None if x is None else float(x)


def best_vs_worst(standing: list[float | None]) -> tuple[int, int] | str:
    """``(best, worst)`` candidate indices, or why there is no pair: ``failed`` (fewer than two
    candidates judged) or ``tie`` (best and worst rank equal)."""
    judged = [(s, i) for i, s in enumerate(standing) if s is not None]
    if len(judged) < 2:
        return "failed"
    best, worst = max(judged), min(judged)
    if best[0] == worst[0]:
        return "tie"
    return best[1], worst[1]


# --------------------------------------------------------------------------- the loop
OnlineDPOResult = FeedbackResult  # what online_dpo() returns (feedback.py)


def _pairs(
    policy: Policy, judge: Judge, prompts: list[Messages], ids: list[list[int]],
    params: SamplingParams,
) -> tuple[list[EncodedPair], dict[str, float]]:  # fmt: skip
    """Sample, judge and pair one step's prompts; the counts of ``online_dpo/*``."""
    outs = policy.generate(ids, params)
    texts = [[o.text for o in group] for group in outs]
    standing = rank(judge, [prompt_text(p) for p in prompts], texts)
    pairs, counts = [], {"failed": 0, "tie": 0}
    for n, s in enumerate(standing):
        choice = best_vs_worst(s)
        if isinstance(choice, str):
            counts[choice] += 1
            continue
        best, worst = (outs[n][i].token_ids.tolist() for i in choice)
        if best and worst:
            pairs.append(EncodedPair(ids[n], [int(t) for t in best], [int(t) for t in worst]))
    lengths = [len(o.token_ids) for group in outs for o in group]
    return pairs, {
        "online_dpo/pairs": float(len(pairs)),
        "online_dpo/dropped_failed": float(counts["failed"]),
        "online_dpo/dropped_ties": float(counts["tie"]),
        "online_dpo/response_length": float(np.mean(lengths)) if lengths else 0.0,
    }


def online_dpo(
    policy: Policy,
    judge: Judge,
    renderer: Any,
    train_prompts: list[Messages],
    val_prompts: list[Messages],
    loss: PreferenceLoss,
    params: SamplingParams,
    **loop: Any,
) -> OnlineDPOResult:
    """Train ``policy`` with ``params.n`` candidates per prompt (see the module docstring):
    :func:`.feedback.online_preference` with this driver's pairs; ``loop`` its options
    (``steps``, ``prompts_per_step``, ``seed``, ``val_period``, ``val_at_end``, ``output_dir``,
    ``log``). ``renderer``: a :class:`PromptRenderer` or a bare tokenizer; ``params``: the
    candidates' sampling (``n`` = K ≥ 2)."""
    if params.n < 2:
        raise ValueError(
            "online DPO needs K >= 2 candidates per prompt (grpo.num_generations_per_prompt)"
        )
    return online_preference(
        policy, judge, PromptRenderer.wrap(renderer), train_prompts, val_prompts, loss, params,
        lambda prompts, ids, p: _pairs(policy, judge, prompts, ids, p), _headline, **loop,
    )  # fmt: skip


def _headline(step: int, m: dict[str, float]) -> str:
    return (f"step {step}: judge win rate over the starting policy {m['val/win_rate']:.3f} "
            f"({int(m['online_dpo/pairs'])} pairs this step)")  # fmt: skip


# --------------------------------------------------------------------------- the pre-flight
def config_problems(cfg: MasterConfig) -> list[str]:
    """What ``dockyard online-dpo`` refuses before anything starts (each line names its key)."""
    problems = judge_problems(cfg, "online DPO")
    if cfg.grpo.num_generations_per_prompt < 2:
        problems.append("grpo.num_generations_per_prompt: online DPO needs K >= 2 candidates")
    return problems
