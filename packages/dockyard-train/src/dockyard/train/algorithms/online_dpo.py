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

Held-out: ``val/win_rate`` = the judge's mean preference for π_step's greedy response over
π_0's on each held-out prompt (a tie, identical responses included, counts half; masked
judgments are left out and counted in ``val/judge_failed``); 0.5 at step 0 by definition.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.interfaces import GenerationResult, LossFn, SamplingParams, TrainMetrics
from dockyard.core.rl.preference import REFERENCE_FREE, PreferenceLoss, PreferencePairsLoss
from dockyard.train.algorithms.dpo import EncodedPair, _prompt, collate_pairs, response_logprobs
from dockyard.train.data import read_records
from dockyard.train.judge import Judge
from dockyard.train.prompts import Messages, PromptRenderer


class Policy(Protocol):
    """What online DPO calls: the trainer (its reference policy kept) and the engines."""

    def generate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[list[GenerationResult]]: ...

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray: ...

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics: ...

    def push_weights(self, version: int) -> None: ...

    def export_hf(self, path: str) -> str: ...


# --------------------------------------------------------------------------- data
def load_prompts(path: str) -> list[Messages]:
    """The distinct prompts of a JSONL or Parquet file of records with a ``prompt`` field (a
    string or chat messages; other fields, such as a DPO pair's responses, are ignored)."""
    seen: dict[str, Messages] = {}
    for where, rec in read_records(path):
        if rec.get("prompt") is None:
            raise ValueError(f"{where}: online DPO reads each record's 'prompt', which is missing")
        msgs = _prompt(rec["prompt"], where)
        seen.setdefault(repr(msgs), msgs)
    if not seen:
        raise ValueError(f"{path}: no prompts")
    return list(seen.values())


def load_prompt_data(cfg: Any) -> tuple[list[Messages], list[Messages]]:
    """``(train, held-out)`` prompts: ``data.train_path`` and ``data.val_path`` (null: a seeded
    tenth of the training prompts), at most ``grpo.max_val_samples`` held out."""
    prompts = load_prompts(cfg.data.train_path)
    cap = cfg.grpo.max_val_samples
    if cfg.data.val_path:
        return prompts, load_prompts(cfg.data.val_path)[:cap]
    n_val = min(cap, max(1, len(prompts) // 10)) if len(prompts) > 1 else 0
    order = np.random.default_rng(cfg.grpo.seed).permutation(len(prompts))
    val = {int(i) for i in order[:n_val]}
    return [p for i, p in enumerate(prompts) if i not in val], [prompts[i] for i in sorted(val)]


def prompt_text(messages: Messages) -> str:
    """The prompt as the judge reads it: the one user message, else ``role: content`` lines."""
    if len(messages) == 1:
        return messages[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


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
@dataclass
class OnlineDPOResult:
    """``history``: each step's metrics; ``val``: step -> held-out metrics; ``responses``: step
    -> the greedy held-out responses (step 0: π_0's); ``output_dir``: the exported model."""

    history: list[dict[str, float]] = field(default_factory=list)
    val: dict[int, dict[str, float]] = field(default_factory=dict)
    responses: dict[int, list[str]] = field(default_factory=dict)
    output_dir: str | None = None


class _Reference:
    """``get_logprobs`` = the reference policy's (for :func:`dpo.response_logprobs`)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def get_logprobs(self, batch: Batch) -> np.ndarray:
        return self.policy.get_reference_logprobs(batch)

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        raise NotImplementedError("the reference policy is not trained")

    def export_hf(self, path: str) -> str:
        raise NotImplementedError("the reference policy is not exported")


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


def win_rate(judge: Judge, prompts: list[str], new: list[str], base: list[str]) -> dict[str, float]:
    """``val/win_rate`` of ``new`` over ``base`` responses (module docstring)."""
    asks = [n for n in range(len(prompts)) if new[n] != base[n]]
    verdicts = judge.compare([(prompts[n], new[n], base[n]) for n in asks])
    prefs = [0.5] * (len(prompts) - len(asks))
    prefs += [v.preference for v in verdicts if v.preference is not None]
    failed = sum(v.preference is None for v in verdicts)
    return {"val/win_rate": float(np.mean(prefs)) if prefs else 0.5,
            "val/judge_failed": float(failed)}  # fmt: skip


def online_dpo(
    policy: Policy,
    judge: Judge,
    renderer: Any,
    train_prompts: list[Messages],
    val_prompts: list[Messages],
    loss: PreferenceLoss,
    params: SamplingParams,
    *,
    steps: int,
    prompts_per_step: int,
    seed: int = 0,
    val_period: int = 0,
    val_at_end: bool = True,
    output_dir: str | None = None,
    log: Any = None,
) -> OnlineDPOResult:
    """Train ``policy`` for ``steps`` steps of ``prompts_per_step`` prompts, ``params.n``
    candidates each (see the module docstring), sampled with seeds from ``seed`` and the step. ``renderer``: a :class:`PromptRenderer` or a
    bare tokenizer; ``params``: the candidates' sampling (``n`` = K ≥ 2); ``log``: a
    :class:`~dockyard.train.logging.MetricsLogger`."""
    if params.n < 2:
        raise ValueError(
            "online DPO needs K >= 2 candidates per prompt (grpo.num_generations_per_prompt)"
        )
    r = PromptRenderer.wrap(renderer)
    train_ids = [r.prompt_ids(r.messages(p)) for p in train_prompts]
    val_ids = [r.prompt_ids(r.messages(p)) for p in val_prompts]
    val_text = [prompt_text(p) for p in val_prompts]
    greedy = SamplingParams(n=1, max_tokens=params.max_tokens, temperature=0.0,
                            stop=params.stop, stop_token_ids=params.stop_token_ids)  # fmt: skip
    result = OnlineDPOResult()

    def evaluate(step: int) -> dict[str, float]:
        if not val_ids:
            return {}
        texts = [g[0].text for g in policy.generate(val_ids, greedy)]
        result.responses[step] = texts
        m = win_rate(judge, val_text, texts, result.responses[0]) if step else {}
        m = m or {"val/win_rate": 0.5, "val/judge_failed": 0.0}
        result.val[step] = m
        return m

    if val_ids:
        evaluate(0)
    pairs_loss = PreferencePairsLoss(loss)
    rng = np.random.default_rng(seed)
    P = min(prompts_per_step, len(train_ids))
    order, pos = rng.permutation(len(train_ids)), 0
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        if pos + P > len(order):
            order, pos = rng.permutation(len(train_ids)), 0
        idx = [int(i) for i in order[pos : pos + P]]
        pos += P
        step_params = dataclasses.replace(params, seed=seed * 1_000_003 + step * 10_007)
        pairs, m = _pairs(policy, judge, [train_prompts[i] for i in idx],
                          [train_ids[i] for i in idx], step_params)  # fmt: skip
        m.update(judge.metrics())
        if pairs:
            ref = (
                None
                if loss.variant in REFERENCE_FREE
                else response_logprobs(_Reference(policy), pairs)
            )
            out = policy.train_step(collate_pairs(pairs, ref), pairs_loss)
            m.update({f"train/{k}": float(v) for k, v in out.items()
                      if isinstance(v, int | float | np.number)})  # fmt: skip
            policy.push_weights(step)
        if (val_period and step % val_period == 0) or (val_at_end and step == steps):
            m.update(evaluate(step))
            m.update({f"val/{k}": v for k, v in judge.metrics().items()})
        m["time/step_s"] = time.perf_counter() - t0
        result.history.append(m)
        _log(log, step, m)
    if output_dir is not None:
        result.output_dir = policy.export_hf(output_dir)
    return result


def _log(log: Any, step: int, metrics: dict[str, float]) -> None:
    if log is None:
        return
    log.log(step, metrics)
    if "val/win_rate" in metrics:
        log.write(f"step {step}: judge win rate over the starting policy "
                  f"{metrics['val/win_rate']:.3f} ({int(metrics['online_dpo/pairs'])} pairs "
                  "this step)")  # fmt: skip


# --------------------------------------------------------------------------- the runtime
def start_policy(cfg: Any, run_dir: str, *, reserve_cpus: float = 0.0) -> Any:
    """The run's :class:`~dockyard.train.runtime.stack.Stack` fleets for online DPO — the
    trainer (keeping π_ref, two rows per pair per micro-batch) and the policy's engines with
    their weight sync — as a :class:`Policy`; ``reserve_cpus`` Ray CPUs are left for a judge
    fleet. No environment, sandbox, buffer or collector: the judge is the reward."""
    from dockyard.train.runtime.stack import Stack

    class PreferenceStack(Stack):  # the trainer keeps π_ref and takes pairs two rows each
        def _start_trainer(self, cpus: float) -> Any:
            from dockyard.train.runtime.placement import FleetSpec
            from dockyard.train.runtime.stack import TORCH_WORKER, torch_worker_config
            from dockyard.train.runtime.trainer import TrainerClient

            p = cfg.policy
            wcfg = {**torch_worker_config(cfg), "train_micro_batch_size": 2 * p.train_micro_batch_size,
                    "reference_policy": cfg.loss_fn.type not in REFERENCE_FREE}  # fmt: skip
            gpus = 1.0 if cfg.cluster.gpus_per_node else 0.0
            spec = FleetSpec("trainer", size=1, cpus=cpus, gpus=gpus)
            return TrainerClient.start(spec, TORCH_WORKER, wcfg, cpus=cfg.cluster.trainer_cpus)

    return StackPolicy(PreferenceStack(cfg, run_dir, environment=False, reserve_cpus=reserve_cpus))


def _offset(params: SamplingParams, by: int) -> SamplingParams:
    """``params`` with its seed moved by ``by`` (each prompt its own seeds; unseeded: as is)."""
    return params if params.seed is None else dataclasses.replace(params, seed=params.seed + by)


class StackPolicy:
    """:class:`Policy` over a started stack: generation fans the prompts out over its engines
    (round-robin), the trainer calls go to its fleet, weights go through its weight sync."""

    def __init__(self, stack: Any) -> None:
        self.stack = stack

    def generate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[list[GenerationResult]]:
        actors = self.stack.engines.actors
        refs = [
            actors[i % len(actors)].generate.remote(p, _offset(params, i * params.n))
            for i, p in enumerate(prompts)
        ]
        return list(self.stack.ray.get(refs))

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        return self.stack.trainer.get_reference_logprobs(batch)

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics:
        return self.stack.trainer.train_step(batch, loss_fn)

    def push_weights(self, version: int) -> None:
        _, lost = self.stack.push_weights(version)
        for i in lost:  # a dead engine is replaced, holding this version
            self.stack.restart_engine(i, version)

    def export_hf(self, path: str) -> str:
        return self.stack.trainer.export_hf(path)

    def shutdown(self) -> None:
        self.stack.shutdown()


# --------------------------------------------------------------------------- the pre-flight
def config_problems(cfg: Any) -> list[str]:
    """What ``dockyard online-dpo`` refuses before anything starts (each line names its key)."""
    from dockyard.train.judge import check_template
    from dockyard.train.preflight import resolve_model

    j, problems = cfg.judge, []
    if not cfg.data.train_path:
        problems.append(
            "data.train_path: online DPO needs a JSONL or Parquet file of {prompt} records"
        )
    if cfg.grpo.num_generations_per_prompt < 2:
        problems.append("grpo.num_generations_per_prompt: online DPO needs K >= 2 candidates")
    if cfg.policy.jax_cfg.enabled:
        problems.append("policy.jax_cfg.enabled: online DPO trains on the torch worker")
    if cfg.cluster.trainer_ranks != 1:
        problems.append("cluster.trainer_ranks: online DPO runs one trainer rank; set it to 1")
    if not j.model_name:
        problems.append("judge.model_name: name the judge model (an HF folder for backend "
                        "'engine', the served model's name for 'openai')")  # fmt: skip
    elif j.backend == "engine":
        problems += resolve_model("judge.model_name", j.model_name)[1]
    if j.backend == "openai" and j.api_key_env and not os.environ.get(j.api_key_env):
        problems.append(f"judge.api_key_env: the environment variable {j.api_key_env!r} is not set")
    template = None
    if j.template_file:
        if not Path(j.template_file).is_file():
            problems.append(f"judge.template_file: no file {j.template_file!r}")
        else:
            template = Path(j.template_file).read_text()
    try:
        from dockyard.train.judge import BUILT_IN

        check_template(
            template or BUILT_IN[j.mode], j.mode, j.template_fields, "judge.template_file"
        )
    except ValueError as e:
        problems.append(str(e))
    return problems
