"""The HLE environment: one question, one final answer, graded as its record says.

Prompt: a system message asking for HLE's response format (``Explanation:``, ``Answer:``,
``Confidence:``) and the question. Grading by the task's ``match`` (:mod:`dockyard.envs.hle.data`):

* ``choice``: the letter that opens the last ``Answer:`` line, against the key;
* ``exact``: the last ``Answer:`` line (else the last ``\\boxed{}``) normalised — case folded,
  whitespace collapsed, ``$`` / ``\\boxed{}`` / a trailing period dropped — equal to the
  normalised key, or shown equal by math-verify (``2^{10}`` = ``1024``);
* ``judge``: the final answer and the reference go to the LLM judge (rubric mode, through the
  :data:`~dockyard.envs.judging.JudgeFn` the runtime passes); correct when the judge's score
  ≥ ``judge_threshold`` (of [0, 1]). A judgment that failed masks the sample
  (``infra_error``, ``metadata["judge_failed"] = True``), never a 0 or a 1. Without a judge
  (``use_judge: false``) such tasks fall back to ``exact`` and say so
  (``metadata["judge_fallback"]``).

A response without a final answer scores 0 without asking anyone.

Reward: ``reward/correct`` ∈ {0, 1}; ``reward/format`` = ``format_weight`` when an ``Answer:``
line was given.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.hle.data import match_kind
from dockyard.envs.judging import JudgeFn, require_judge
from dockyard.envs.math.extract import extract_boxed
from dockyard.envs.math.verify import MathVerifier
from dockyard.envs.rewards import CORRECT, FORMAT, RewardConfig, approx_token_count, infra_failure

HLE_SYSTEM = (
    "Your response should be in the following format:\n"
    "Explanation: {your explanation for your answer}\n"
    "Answer: {your final answer}\n"
    "Confidence: {your confidence score between 0% and 100% for your answer}"
)

JUDGE_QUESTION = """\
Decide whether a final answer to the question below is equivalent to the reference answer: the \
same meaning, whatever the wording or notation. An answer that hedges between several options, \
or is only partly right, is not equivalent. Give the highest score if it is equivalent, the \
lowest if it is not.

[Question]
{question}

[Reference answer]
{answer}"""

_ANSWER = re.compile(r"(?im)^[ \t*#>_-]*(?:final[ \t]+)?answer[ \t*]*[:：][ \t*]*(.*?)[ \t*]*$")
_LETTER = re.compile(r"^[(\[]?([A-Za-z])(?:[)\].:]|\s|$)")
_BOXED = re.compile(r"^\\boxed\{(.*)\}$")


def final_answer(response: str) -> tuple[str | None, str | None]:
    """``(answer, source)``: the last non-empty ``Answer:`` line (``answer_line``), else the last
    ``\\boxed{}`` (``boxed``), else ``(None, None)``."""
    lines = [a for a in _ANSWER.findall(response) if a.strip()]
    if lines:
        return lines[-1].strip(), "answer_line"
    boxed = extract_boxed(response)
    return (boxed, "boxed") if boxed else (None, None)


def normalise(text: str) -> str:
    """Case folded, ``$`` and a wrapping ``\\boxed{}`` removed, whitespace collapsed, no
    trailing period."""
    s = text.strip().rstrip(".").strip().strip("$").strip()
    if m := _BOXED.match(s):
        s = m.group(1)
    return " ".join(s.split()).rstrip(".").strip().casefold()


def choice_letter(answer: str) -> str | None:
    """The letter that opens ``answer`` (``B``, ``(B)``, ``B.``, ``B) text``), upper case."""
    m = _LETTER.match(answer.strip())
    return m.group(1).upper() if m else None


class HleEnvironment(BaseEnvironment):
    """Single-turn HLE-style questions (see the module docstring).

    Args:
        judge: the runtime's judge (``needs_judge``); required when ``use_judge``.
        use_judge: grade ``judge`` tasks with the judge (false: fall back to exact match).
        judge_threshold: the judge's score in [0, 1] from which an answer counts as correct.
        verify_timeout_s: the budget of one math-verify check (``exact``).
    """

    name = "hle"

    def __init__(
        self,
        judge: JudgeFn | None = None,
        use_judge: bool = True,
        judge_threshold: float = 0.5,
        reward: RewardConfig | None = None,
        verify_timeout_s: float = 5.0,
        system_prompt: str = HLE_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
    ) -> None:
        super().__init__(reward, count_tokens)
        if not 0.0 < judge_threshold <= 1.0:
            raise ValueError(f"judge_threshold must be in (0, 1], got {judge_threshold}")
        self.judge = require_judge(judge, "hle") if use_judge else None
        self.judge_threshold = judge_threshold
        self.verifier = MathVerifier(verify_timeout_s)
        self.system_prompt = system_prompt

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        if task.get("image"):
            raise ValueError(
                f"HLE task {task.get('id')!r} has an image: this environment is text-only (the "
                "hle dataset and benchmark skip image questions; drop them from a train_path file)"
            )
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": task["question"]},
        ]

    def _exact(self, gold: str, answer: str) -> bool:
        if normalise(answer) == normalise(gold):
            return True
        return self.verifier.check(gold, answer).correct

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        answer, source = final_answer(response)
        # a raw HLE record (data.train_path) has no "match": its answer_type decides
        match = task.get("match") or match_kind(str(task["answer_type"]), str(task["answer"]))
        meta: dict[str, Any] = {"extracted": answer, "answer_source": source, "match": match,
                                "judge_failed": False}  # fmt: skip
        correct = False
        if answer is None:
            pass
        elif match == "choice":
            letter = choice_letter(answer)
            meta["extracted"] = letter
            correct = letter is not None and letter == choice_letter(task["answer"])
        elif match == "judge" and self.judge is not None:
            prompt = JUDGE_QUESTION.format(question=task["question"], answer=task["answer"])
            score = await self.judge(prompt, answer)
            meta["judge_score"] = score
            if score is None:  # masked and counted: never a silent 0 or 1
                return infra_failure("judge_failed", **{**meta, "judge_failed": True})
            correct = score >= self.judge_threshold
        else:
            meta["judge_fallback"] = match == "judge"
            correct = self._exact(str(task["answer"]), answer)
        fmt = self.reward.format_weight if source == "answer_line" else 0.0
        result = StepResult(rewards={CORRECT: float(correct), FORMAT: fmt}, metadata=meta)
        return self._shape(result, response)
