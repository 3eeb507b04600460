"""RLAIF / constitutional AI: the policy answers, an LLM judge critiques each answer against a
written constitution, the answer is revised in the light of the critique, and the pair
(revision ≻ original) takes a DPO step — preference pairs without a human label (Bai et al.
2022, "Constitutional AI: Harmlessness from AI Feedback", its critique → revision loop; Lee et
al. 2023, "RLAIF"). Departures: the pairs train the policy directly by DPO (any of
:mod:`.dpo`'s variants), online — each step's answers come from the policy being trained —
instead of an SL stage then RL against a preference model; and each pair can be checked by the
pairwise judge, which drops a revision it does not prefer.

    ref  = π before its first step;  base = π_0's greedy responses to the held-out prompts
    for step in range(1, steps + 1):
        prompts   = next P prompts                        # seeded order, reshuffled per epoch
        y         = engines.generate(prompts, n=K)        # the policy's answers
        c         = judge(critique(constitution, x, y))   # free text
        y'        = reviser(revision(constitution, x, y, c))   # the policy's engines or the judge
        keep (x, y' ≻ y) unless: c or y' failed | y' == y | judge(x: y' vs y) ≤ 1/2 (checked)
        DPO step on the kept pairs (ref logprobs from π_ref); push weights (version = step)
        log(step, judge/* + rlaif/* + train/*);  val/win_rate every val_period steps

Tokens: the original is the engine's own ids (its end-of-turn token included when it stopped
there); the revision is its text in the policy's tokenizer plus the end-of-turn token, cut to
``max_tokens`` (then without it). A critique or revision request is retried like a judgment
(``judge.max_retries``, a fresh sample at temperature max(T, 1)) after a transport error or an
empty reply, and counted in ``judge/*``; one that never came is dropped, never guessed.

Metrics: ``rlaif/pairs``, ``rlaif/dropped_failed`` (a critique, revision or check that never
came), ``rlaif/dropped_unchanged`` (the revision is the original), ``rlaif/dropped_not_preferred``
(the judge did not prefer the revision: preference ≤ 1/2, the two orders disagreeing
included), ``rlaif/revision_preference`` (the judge's mean preference for the revisions it
judged; absent when none was), ``rlaif/response_length``; held out, ``val/win_rate`` and
``val/judge_failed`` (:mod:`.feedback`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dockyard.core.config import MasterConfig
from dockyard.core.config.judge import RLAIFConfig
from dockyard.core.interfaces import GenerationResult, SamplingParams
from dockyard.core.rl.preference import PreferenceLoss
from dockyard.train.algorithms.dpo import EncodedPair
from dockyard.train.algorithms.feedback import (
    FeedbackResult,
    Policy,
    Sampler,
    judge_problems,
    online_preference,
    prompt_text,
)
from dockyard.train.judge import Judge, template_fields
from dockyard.train.prompts import Messages, PromptRenderer

CRITIQUE_TEMPLATE = """\
Critique the response to the prompt against the constitution below: name each principle the \
response breaks and say how, or say that it breaks none.

[Constitution]
{constitution}

[Prompt]
{prompt}

[Response]
{response}

Critique:"""

REVISION_TEMPLATE = """\
Rewrite the response to the prompt so that it follows every principle of the constitution, \
fixing what the critique names. Reply with the rewritten response only, nothing before or \
after it.

[Constitution]
{constitution}

[Prompt]
{prompt}

[Response]
{response}

[Critique]
{critique}

Rewritten response:"""

FIELDS = {"critique": ("constitution", "prompt", "response"),
          "revision": ("constitution", "prompt", "response", "critique")}  # fmt: skip
"""The fields each template may name (all filled by the driver)."""
REQUIRED = {"critique": ("constitution", "response"), "revision": ("critique",)}
"""The fields each template must name: a critique reads the constitution and the response; a
revision, the critique."""


def check_template(template: str, kind: str, where: str) -> None:
    """ValueError naming ``where`` when a ``kind`` (critique | revision) template lacks a
    required field or names one the driver does not fill."""
    names = template_fields(template)
    if missing := [f for f in REQUIRED[kind] if f not in names]:
        raise ValueError(f"{where}: a {kind} template must contain "
                         f"{', '.join('{' + f + '}' for f in missing)}")  # fmt: skip
    if unknown := sorted(names - set(FIELDS[kind])):
        raise ValueError(f"{where}: the {kind} template's field(s) {', '.join(unknown)} have no "
                         f"value (it may name {', '.join(FIELDS[kind])})")  # fmt: skip


@dataclass
class Constitution:
    """The principles' text and the critique / revision request templates."""

    text: str
    critique: str = CRITIQUE_TEMPLATE
    revision: str = REVISION_TEMPLATE

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("the constitution is empty: write its principles in the file")
        check_template(self.critique, "critique", "critique template")
        check_template(self.revision, "revision", "revision template")

    @classmethod
    def from_config(cls, rlaif_cfg: RLAIFConfig) -> Constitution:
        """From ``rlaif`` of a ``MasterConfig`` (the files read here)."""
        if not rlaif_cfg.constitution_file:
            raise ValueError("rlaif.constitution_file: name the constitution's text file")
        return cls(Path(rlaif_cfg.constitution_file).read_text(),
                   *(Path(f).read_text() if f else t for f, t in
                     ((rlaif_cfg.critique_template_file, CRITIQUE_TEMPLATE),
                      (rlaif_cfg.revision_template_file, REVISION_TEMPLATE))))  # fmt: skip


# --------------------------------------------------------------------------- free-text requests
def judge_texts(judge: Judge, requests: list[str], max_tokens: int) -> list[str | None]:
    """The judge model's replies (stripped) to ``requests`` (each one user message), retried
    after a transport error or an empty reply and counted in ``judge/*`` like its judgments;
    None where none came."""

    async def one(sem: asyncio.Semaphore, text: str) -> str | None:
        messages = [{"role": "user", "content": text}]
        for attempt in range(judge.max_retries + 1):
            judge.counts["retries"] += bool(attempt)
            judge.counts["requests"] += 1
            temperature = judge.temperature if attempt == 0 else max(judge.temperature, 1.0)
            try:
                async with sem:
                    reply = await asyncio.wait_for(
                        judge.backend.complete(messages, temperature, max_tokens), judge.timeout_s
                    )
            except Exception:  # a transport error or a timeout: a fresh request
                judge.counts["errors"] += 1
                continue
            if reply.strip():
                return reply.strip()
            judge.counts["parse_failures"] += 1
        judge.counts["failed"] += 1
        return None

    async def go() -> list[str | None]:
        sem = asyncio.Semaphore(judge.max_concurrency)
        return list(await asyncio.gather(*(one(sem, t) for t in requests)))

    return judge.run(go()) if requests else []


def revise_with_policy(
    policy: Sampler, renderer: PromptRenderer, requests: list[str], params: SamplingParams
) -> list[str | None]:
    """The policy's replies (one sample each, ``params``) to the revision ``requests``, each
    rendered as one user message with the policy's chat template; None for an empty one."""
    if not requests:
        return []
    ids = [renderer.prompt_ids([{"role": "user", "content": t}]) for t in requests]
    outs = policy.generate(ids, params)
    return [g[0].text.strip() or None for g in outs]


# --------------------------------------------------------------------------- one step's pairs
def _revision_ids(renderer: PromptRenderer, text: str, max_tokens: int) -> list[int]:
    ids = [*renderer.encode(text), int(renderer.tokenizer.eos_token_id)]
    return ids[:max_tokens]


def build_pairs(
    policy: Sampler,
    judge: Judge,
    renderer: PromptRenderer,
    constitution: Constitution,
    prompts: list[Messages],
    ids: list[list[int]],
    params: SamplingParams,
    *,
    reviser: Literal["policy", "judge"] = "policy",
    check: bool = True,
    critique_max_tokens: int = 256,
) -> tuple[list[EncodedPair], dict[str, float]]:
    """Sample, critique, revise (and check) one step's prompts (module docstring); the pairs
    and the ``rlaif/*`` counts."""
    outs: list[list[GenerationResult]] = policy.generate(ids, params)
    items = [(n, o) for n, group in enumerate(outs) for o in group if len(o.token_ids)]
    texts = [prompt_text(p) for p in prompts]
    fill = [{"constitution": constitution.text, "prompt": texts[n], "response": o.text}
            for n, o in items]  # fmt: skip
    critiques = judge_texts(judge, [constitution.critique.format(**f) for f in fill],
                            critique_max_tokens)  # fmt: skip
    asked = [k for k, c in enumerate(critiques) if c is not None]
    requests = [constitution.revision.format(**fill[k], critique=critiques[k]) for k in asked]
    if reviser == "policy":
        one = dataclasses.replace(params, n=1)  # one revision per answer, seeded alike
        replies = revise_with_policy(policy, renderer, requests, one)
    else:
        replies = judge_texts(judge, requests, params.max_tokens)
    revised: list[str | None] = [None] * len(items)
    for k, reply in zip(asked, replies, strict=True):
        revised[k] = reply
    counts = {"failed": 0, "unchanged": 0, "not_preferred": 0}
    candidates = []
    for k, (_, o) in enumerate(items):
        if revised[k] is None:
            counts["failed"] += 1
        elif revised[k] == o.text.strip():
            counts["unchanged"] += 1
        else:
            candidates.append(k)
    prefs: list[float] = []
    if check and candidates:
        verdicts = judge.compare([(texts[items[k][0]], revised[k] or "", items[k][1].text)
                                  for k in candidates])  # fmt: skip
        kept = []
        for k, v in zip(candidates, verdicts, strict=True):
            if v.preference is None:
                counts["failed"] += 1
                continue
            prefs.append(v.preference)
            if v.preference > 0.5:
                kept.append(k)
            else:
                counts["not_preferred"] += 1
        candidates = kept
    pairs = [
        EncodedPair(ids[items[k][0]], _revision_ids(renderer, revised[k] or "", params.max_tokens),
                    [int(t) for t in items[k][1].token_ids])
        for k in candidates
    ]  # fmt: skip
    lengths = [len(o.token_ids) for group in outs for o in group]
    m = {
        "rlaif/pairs": float(len(pairs)),
        "rlaif/dropped_failed": float(counts["failed"]),
        "rlaif/dropped_unchanged": float(counts["unchanged"]),
        "rlaif/dropped_not_preferred": float(counts["not_preferred"]),
        "rlaif/response_length": float(np.mean(lengths)) if lengths else 0.0,
    }
    if prefs:  # none judged (the check off, or nothing to check): no mean to log
        m["rlaif/revision_preference"] = float(np.mean(prefs))
    return pairs, m


# --------------------------------------------------------------------------- the loop
RLAIFResult = FeedbackResult  # what rlaif() returns (feedback.py)


def rlaif(
    policy: Policy,
    judge: Judge,
    renderer: Any,
    constitution: Constitution,
    train_prompts: list[Messages],
    val_prompts: list[Messages],
    loss: PreferenceLoss,
    params: SamplingParams,
    *,
    reviser: Literal["policy", "judge"] = "policy",
    check_revisions: bool = True,
    critique_max_tokens: int = 256,
    **loop: Any,
) -> RLAIFResult:
    """Train ``policy`` with ``params.n`` answers per prompt, critiqued and revised (module
    docstring): :func:`.feedback.online_preference` with this driver's pairs; ``loop`` its
    options (``steps``, ``prompts_per_step``, ``seed``, ``val_period``, ``val_at_end``,
    ``output_dir``, ``log``). ``renderer``: a :class:`PromptRenderer` or a bare tokenizer;
    ``judge``: a pairwise :class:`Judge` (the held-out win rate, and the check)."""
    if judge.mode != "pairwise":
        raise ValueError("RLAIF's win rate and revision check need judge.mode: pairwise")
    r = PromptRenderer.wrap(renderer)

    def make_pairs(prompts: list[Messages], ids: list[list[int]], p: SamplingParams) -> Any:
        return build_pairs(policy, judge, r, constitution, prompts, ids, p, reviser=reviser,
                           check=check_revisions, critique_max_tokens=critique_max_tokens)  # fmt: skip

    return online_preference(policy, judge, r, train_prompts, val_prompts, loss, params,
                             make_pairs, _headline, **loop)  # fmt: skip


def _headline(step: int, m: dict[str, float]) -> str:
    return (f"step {step}: judge win rate over the starting policy {m['val/win_rate']:.3f} "
            f"({int(m['rlaif/pairs'])} pairs this step, {int(m['rlaif/dropped_not_preferred'])} "
            "revisions not preferred)")  # fmt: skip


# --------------------------------------------------------------------------- the pre-flight
def config_problems(cfg: MasterConfig) -> list[str]:
    """What ``dockyard rlaif`` refuses before anything starts (each line names its key)."""
    problems = judge_problems(cfg, "RLAIF")
    if cfg.judge.mode != "pairwise":
        problems.append("judge.mode: RLAIF's win rate and revision check need a pairwise judge")
    ra = cfg.rlaif
    if not ra.constitution_file:
        problems.append("rlaif.constitution_file: name the constitution's text file (its "
                        "principles; examples/data/constitution.md is one)")  # fmt: skip
    elif not Path(ra.constitution_file).is_file():
        problems.append(f"rlaif.constitution_file: no file {ra.constitution_file!r}")
    elif not Path(ra.constitution_file).read_text().strip():
        problems.append(f"rlaif.constitution_file: {ra.constitution_file!r} is empty")
    for key, kind, path in (("rlaif.critique_template_file", "critique", ra.critique_template_file),
                            ("rlaif.revision_template_file", "revision", ra.revision_template_file)):  # fmt: skip
        if path is None:
            continue
        if not Path(path).is_file():
            problems.append(f"{key}: no file {path!r}")
            continue
        try:
            check_template(Path(path).read_text(), kind, key)
        except ValueError as e:
            problems.append(str(e))
    return problems
