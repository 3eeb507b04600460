"""What the AI-feedback drivers share (online DPO, :mod:`.online_dpo`; RLAIF, :mod:`.rlaif`):
the prompts, the DPO step on judged pairs, the judge's held-out win rate, the policy's fleets
and the judge's, and the pre-flight of the judge.

Held-out: ``val/win_rate`` = the judge's mean preference for π_step's greedy response over
π_0's on each held-out prompt (a tie, identical responses included, counts half; masked
judgments are left out and counted in ``val/judge_failed``); 0.5 at step 0 by definition.

A DPO step on pairs (:func:`dpo_step`): reference logprobs of the new pairs from the trainer's
kept π_ref (none for the reference-free variants), :func:`.dpo.collate_pairs`, one
``train_step`` with :class:`~dockyard.core.rl.preference.PreferencePairsLoss`, then the new
weights to the engines (version = the step).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.config import MasterConfig
from dockyard.core.experience import Batch
from dockyard.core.interfaces import GenerationResult, LossFn, SamplingParams, TrainMetrics
from dockyard.core.rl.preference import REFERENCE_FREE, PreferenceLoss, PreferencePairsLoss
from dockyard.train.algorithms.configs import stack_config, trainer_fleet_config
from dockyard.train.algorithms.dpo import EncodedPair, _prompt, collate_pairs, response_logprobs
from dockyard.train.data import read_records
from dockyard.train.judge import BUILT_IN, Judge, backend_from_config, check_template
from dockyard.train.logging import MetricsLogger
from dockyard.train.models import resolve_model
from dockyard.train.prompts import Messages, PromptRenderer
from dockyard.train.runtime.judge_fleet import start_judge_fleet, stop_judge_fleet
from dockyard.train.runtime.stack import Stack


class Sampler(Protocol):
    """The policy's engines: ``params.n`` completions of each prompt (token ids)."""

    def generate(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[list[GenerationResult]]: ...


class Policy(Sampler, Protocol):
    """What the AI-feedback drivers call: the engines and the trainer (its reference policy
    kept)."""

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray: ...

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics: ...

    def push_weights(self, version: int) -> None: ...

    def export_hf(self, path: str) -> str: ...


# --------------------------------------------------------------------------- data
def load_prompts(path: str, what: str = "online DPO") -> list[Messages]:
    """The distinct prompts of a JSONL or Parquet file of records with a ``prompt`` field (a
    string or chat messages; other fields, such as a DPO pair's responses, are ignored)."""
    seen: dict[str, Messages] = {}
    for where, rec in read_records(path):
        if rec.get("prompt") is None:
            raise ValueError(f"{where}: {what} reads each record's 'prompt', which is missing")
        msgs = _prompt(rec["prompt"], where)
        seen.setdefault(repr(msgs), msgs)
    if not seen:
        raise ValueError(f"{path}: no prompts")
    return list(seen.values())


def load_prompt_data(
    cfg: MasterConfig, what: str = "online DPO"
) -> tuple[list[Messages], list[Messages]]:
    """``(train, held-out)`` prompts: ``data.train_path`` and ``data.val_path`` (null: a seeded
    tenth of the training prompts), at most ``grpo.max_val_samples`` held out."""
    if not cfg.data.train_path:  # (judge_problems says so first)
        raise ValueError(f"data.train_path: set it to the JSONL of prompts {what} trains on")
    prompts = load_prompts(cfg.data.train_path, what)
    cap = cfg.grpo.max_val_samples
    if cfg.data.val_path:
        return prompts, load_prompts(cfg.data.val_path, what)[:cap]
    n_val = min(cap, max(1, len(prompts) // 10)) if len(prompts) > 1 else 0
    order = np.random.default_rng(cfg.grpo.seed).permutation(len(prompts))
    val = {int(i) for i in order[:n_val]}
    return [p for i, p in enumerate(prompts) if i not in val], [prompts[i] for i in sorted(val)]


def prompt_text(messages: Messages) -> str:
    """The prompt as the judge reads it: the one user message, else ``role: content`` lines."""
    if len(messages) == 1:
        return messages[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class PromptOrder:
    """``take()``: the next ``per_step`` prompt indices of ``n``, in a seeded order reshuffled
    each epoch (a step never straddles two epochs)."""

    def __init__(self, n: int, per_step: int, seed: int) -> None:
        self.rng, self.n, self.per_step = np.random.default_rng(seed), n, min(per_step, n)
        self.order, self.pos = self.rng.permutation(n), 0

    def take(self) -> list[int]:
        if self.pos + self.per_step > len(self.order):
            self.order, self.pos = self.rng.permutation(self.n), 0
        idx = [int(i) for i in self.order[self.pos : self.pos + self.per_step]]
        self.pos += self.per_step
        return idx


def step_params(params: SamplingParams, seed: int, step: int) -> SamplingParams:
    """``params`` seeded from the run's ``seed`` and the step."""
    return dataclasses.replace(params, seed=seed * 1_000_003 + step * 10_007)


def greedy(params: SamplingParams) -> SamplingParams:
    """One greedy sample with ``params``' length and stops (the held-out responses)."""
    return SamplingParams(n=1, max_tokens=params.max_tokens, temperature=0.0,
                          stop=params.stop, stop_token_ids=params.stop_token_ids)  # fmt: skip


# --------------------------------------------------------------------------- training
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


def dpo_step(policy: Policy, pairs: list[EncodedPair], loss: PreferenceLoss,
             step: int) -> dict[str, float]:  # fmt: skip
    """One DPO step on ``pairs`` (module docstring) and the push of version ``step``;
    ``train/*`` metrics. Nothing happens (``{}``) without pairs."""
    if not pairs:
        return {}
    ref = None if loss.variant in REFERENCE_FREE else response_logprobs(_Reference(policy), pairs)
    out = policy.train_step(collate_pairs(pairs, ref), PreferencePairsLoss(loss))
    policy.push_weights(step)
    return {
        f"train/{k}": float(v) for k, v in out.items() if isinstance(v, int | float | np.number)
    }


# --------------------------------------------------------------------------- held-out
def win_rate(judge: Judge, prompts: list[str], new: list[str], base: list[str]) -> dict[str, float]:
    """``val/win_rate`` of ``new`` over ``base`` responses (module docstring)."""
    asks = [n for n in range(len(prompts)) if new[n] != base[n]]
    verdicts = judge.compare([(prompts[n], new[n], base[n]) for n in asks])
    prefs = [0.5] * (len(prompts) - len(asks))
    prefs += [v.preference for v in verdicts if v.preference is not None]
    failed = sum(v.preference is None for v in verdicts)
    return {"val/win_rate": float(np.mean(prefs)) if prefs else 0.5,
            "val/judge_failed": float(failed)}  # fmt: skip


class HeldOut:
    """The held-out win rate over the starting policy: ``evaluate(step)`` samples π_step's
    greedy responses to ``val_ids`` (step 0: π_0's, the baseline) and judges them against
    π_0's. ``responses``: step -> the greedy texts; ``val``: step -> the metrics."""

    def __init__(self, policy: Policy, judge: Judge, val_ids: list[list[int]],
                 val_text: list[str], params: SamplingParams) -> None:  # fmt: skip
        self.policy, self.judge, self.ids, self.text = policy, judge, val_ids, val_text
        self.params = greedy(params)
        self.responses: dict[int, list[str]] = {}
        self.val: dict[int, dict[str, float]] = {}

    def evaluate(self, step: int) -> dict[str, float]:
        if not self.ids:
            return {}
        texts = [g[0].text for g in self.policy.generate(self.ids, self.params)]
        self.responses[step] = texts
        m = win_rate(self.judge, self.text, texts, self.responses[0]) if step else {}
        m = m or {"val/win_rate": 0.5, "val/judge_failed": 0.0}
        self.val[step] = m
        return m


# --------------------------------------------------------------------------- the loop
PairMaker = Callable[[list[Messages], list[list[int]], SamplingParams],
                     tuple[list[EncodedPair], dict[str, float]]]  # fmt: skip
"""``make_pairs(prompts, prompt_ids, params) -> (pairs, metrics)``: a driver's own part of a
step — online DPO ranks K candidates, RLAIF critiques and revises."""


@dataclasses.dataclass
class FeedbackResult:
    """``history``: each step's metrics; ``val``: step -> held-out metrics; ``responses``: step
    -> the greedy held-out responses (step 0: π_0's); ``output_dir``: the exported model."""

    history: list[dict[str, float]] = dataclasses.field(default_factory=list)
    val: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    responses: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    output_dir: str | None = None


def online_preference(
    policy: Policy,
    judge: Judge,
    renderer: PromptRenderer,
    train_prompts: list[Messages],
    val_prompts: list[Messages],
    loss: PreferenceLoss,
    params: SamplingParams,
    make_pairs: PairMaker,
    headline: Callable[[int, dict[str, float]], str],
    *,
    steps: int,
    prompts_per_step: int,
    seed: int = 0,
    val_period: int = 0,
    val_at_end: bool = True,
    output_dir: str | None = None,
    log: Any = None,
) -> FeedbackResult:
    """The loop both AI-feedback drivers run: ``steps`` steps of ``prompts_per_step`` prompts
    (a seeded order, reshuffled per epoch), each step's pairs from ``make_pairs`` with sampling
    seeded from ``seed`` and the step, a DPO step on them (:func:`dpo_step`), the held-out win
    rate every ``val_period`` steps and after the last (``val_at_end``); a step with held-out
    metrics is logged with ``headline(step, metrics)``."""
    train_ids = [renderer.prompt_ids(renderer.messages(p)) for p in train_prompts]
    val_ids = [renderer.prompt_ids(renderer.messages(p)) for p in val_prompts]
    held_out = HeldOut(policy, judge, val_ids, [prompt_text(p) for p in val_prompts], params)
    result = FeedbackResult(val=held_out.val, responses=held_out.responses)
    held_out.evaluate(0)
    order = PromptOrder(len(train_ids), prompts_per_step, seed)
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        idx = order.take()
        pairs, m = make_pairs([train_prompts[i] for i in idx], [train_ids[i] for i in idx],
                              step_params(params, seed, step))  # fmt: skip
        m.update(judge.metrics())
        m.update(dpo_step(policy, pairs, loss, step))
        if (val_period and step % val_period == 0) or (val_at_end and step == steps):
            m.update(held_out.evaluate(step))
            m.update({f"val/{k}": v for k, v in judge.metrics().items()})
        m["time/step_s"] = time.perf_counter() - t0
        result.history.append(m)
        if log is not None:
            log.log(step, m)
            if "val/win_rate" in m:
                log.write(headline(step, m))
    if output_dir is not None:
        result.output_dir = policy.export_hf(output_dir)
    return result


# --------------------------------------------------------------------------- the runtime
def start_policy(cfg: MasterConfig, run_dir: str, *, reserve_cpus: float = 0.0) -> Any:
    """The run's :class:`~dockyard.train.runtime.stack.Stack` fleets for a preference driver
    — the trainer (keeping π_ref, two rows per pair per micro-batch) and the policy's engines
    with their weight sync — as a :class:`Policy`; ``reserve_cpus`` Ray CPUs are left for a
    judge fleet. No environment, sandbox, buffer or collector: the judge is the reward."""
    if cfg.policy.jax_cfg.enabled:  # (refused by the pre-flight: judge_problems)
        raise ValueError("policy.jax_cfg.enabled: the preference drivers train on the torch worker")
    trainer = trainer_fleet_config(
        cfg,
        train_micro_batch_size=2 * cfg.policy.train_micro_batch_size,  # a pair's two rows
        reference_policy=cfg.loss_fn.type not in REFERENCE_FREE,  # π_ref for the loss
    )
    own = stack_config(cfg, trainer=trainer, environment=False)
    return StackPolicy(Stack(own, run_dir, reserve_cpus=reserve_cpus))


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


def sampling_params(cfg: MasterConfig) -> SamplingParams:
    """The policy's sampling (``policy.generation``), ``grpo.num_generations_per_prompt`` each."""
    gen = cfg.policy.generation
    return SamplingParams(n=cfg.grpo.num_generations_per_prompt, max_tokens=gen.max_new_tokens,
                          temperature=gen.temperature, top_p=gen.top_p, top_k=gen.top_k,
                          stop=list(gen.stop_strings), stop_token_ids=list(gen.stop_token_ids))  # fmt: skip


def run_with_judge(cfg: MasterConfig, desc: str, progress: bool,
                   body: Callable[[Policy, Judge, Any, Any], Any]) -> tuple[Any, str]:  # fmt: skip
    """Start the policy's fleets, the judge (its own vLLM fleet for ``judge.backend: engine``)
    and a metrics logger, return ``(body(policy, judge, tokenizer, log), log folder)``, and
    stop everything whatever happens."""
    # lazy: transformers is heavy (~2 s) and the pre-flight imports this module for its checks
    from transformers import AutoTokenizer

    p, g, j = cfg.policy, cfg.grpo, cfg.judge
    gpus = 1.0 if cfg.cluster.gpus_per_node else 0.0
    judge_cpus = 0.0 if j.backend == "openai" or gpus else 0.25 * j.num_engines
    tok = AutoTokenizer.from_pretrained(p.tokenizer.name or p.model_name)
    policy = start_policy(cfg, str(cfg.logger.log_dir), reserve_cpus=judge_cpus)
    fleet = judge = log = None
    try:  # whatever started is stopped, whatever fails
        if j.backend == "engine":
            if not j.model_name:  # (judge_problems says so first)
                raise ValueError("judge.model_name: set the judge's model (backend: engine)")
            fleet = start_judge_fleet(j.model_name, j.num_engines, gpus=gpus, cpus=judge_cpus / j.num_engines or 1.0, seed=g.seed)  # fmt: skip
        judge = Judge.from_config(j, backend_from_config(j, fleet.actors if fleet else None))
        log = MetricsLogger(cfg.logger, g.max_num_steps, config_dict=cfg.model_dump(mode="json"),
                            progress=progress, desc=desc)  # fmt: skip
        result = body(policy, judge, tok, log)
    finally:
        for close in (log and log.close, judge and judge.close):
            if close:
                close()
        if fleet is not None:
            stop_judge_fleet(fleet)
        policy.shutdown()
    return result, str(cfg.logger.log_dir if log is None else log.dir)


# --------------------------------------------------------------------------- the pre-flight
def judge_problems(cfg: MasterConfig, what: str) -> list[str]:
    """What a judged driver (``what``: ``online DPO``, ``RLAIF``) refuses before anything
    starts: the data, the trainer, the judge (each line names its key)."""

    j, problems = cfg.judge, []
    if not cfg.data.train_path:
        problems.append(
            f"data.train_path: {what} needs a JSONL or Parquet file of {{prompt}} records"
        )
    if cfg.policy.jax_cfg.enabled:
        problems.append(f"policy.jax_cfg.enabled: {what} trains on the torch worker")
    if cfg.cluster.trainer_ranks != 1:
        problems.append(f"cluster.trainer_ranks: {what} runs one trainer rank; set it to 1")
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
        check_template(
            template or BUILT_IN[j.mode], j.mode, j.template_fields, "judge.template_file"
        )
    except ValueError as e:
        problems.append(str(e))
    return problems
