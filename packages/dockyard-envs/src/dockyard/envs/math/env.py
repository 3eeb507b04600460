"""The math environments: free-form answers (math-verify) and multiple choice.

Task shapes:

* :class:`MathEnvironment`: ``{"id", "problem", "answer"}`` (``answer`` as LaTeX or plain text).
* :class:`MultipleChoiceEnvironment`: ``{"id", "question", "choices": [str, ...], "answer": "B"}``.

Reward: ``reward/correct`` ∈ {0, 1}; ``reward/format`` = ``format_weight`` when the answer was
given in the requested form (``\\boxed{}`` / an ``Answer:`` line), else 0; optional DAPO overlong
shaping. Metadata: the extracted answer, where it came from, and ``verify_timeout``.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.math.extract import extract_answer, extract_answer_letter, extract_choice
from dockyard.envs.math.verify import MathVerifier
from dockyard.envs.rewards import CORRECT, FORMAT, RewardConfig, approx_token_count

MATH_SYSTEM = "Solve the problem. Reason step by step, then give the final answer as \\boxed{...}."
MCQ_SYSTEM = (
    "Answer the multiple-choice question. End with a line 'Answer: X' where X is the letter."
)


class MathEnvironment(BaseEnvironment):
    """Single-turn math scored by math-verify (see the module docstring)."""

    name = "math"

    def __init__(
        self,
        reward: RewardConfig | None = None,
        verify_timeout_s: float = 5.0,
        system_prompt: str = MATH_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
    ) -> None:
        super().__init__(reward, count_tokens)
        self.verifier = MathVerifier(verify_timeout_s)
        self.system_prompt = system_prompt

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": task["problem"]},
        ]

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        answer, source = extract_answer(response)
        verdict = self.verifier.check(str(task["answer"]), answer)
        result = StepResult(
            rewards={
                CORRECT: 1.0 if verdict.correct else 0.0,
                FORMAT: self.reward.format_weight if source in ("boxed", "answer_line") else 0.0,
            },
            metadata={
                "extracted": answer,
                "answer_source": source,
                "verify_timeout": verdict.timed_out,
                "verify_error": verdict.error,
            },
        )
        return self._shape(result, response)


class MultipleChoiceEnvironment(BaseEnvironment):
    """Single-turn multiple choice: the letter from ``Answer: X`` against ``task["answer"]``.

    Args:
        strict: read only the last ``Answer: X`` line (:func:`extract_answer_letter`: what the
            benchmarks of ``dockyard eval`` score by); else also ``answer is **X**`` and a lone
            ``\\boxed{X}`` (:func:`extract_choice`).
    """

    name = "mcq"

    def __init__(
        self,
        reward: RewardConfig | None = None,
        system_prompt: str = MCQ_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        strict: bool = False,
    ) -> None:
        super().__init__(reward, count_tokens)
        self.system_prompt = system_prompt
        self.strict = strict

    @staticmethod
    def _letters(task: dict[str, Any]) -> str:
        n = len(task["choices"])
        if not 2 <= n <= 26:
            raise ValueError(f"task {task.get('id')!r}: 'choices' needs 2..26 entries, got {n}")
        return string.ascii_uppercase[:n]

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        letters = self._letters(task)
        lines = [task["question"], ""] + [
            f"{letter}. {choice}" for letter, choice in zip(letters, task["choices"], strict=True)
        ]
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": "\n".join(lines)},
        ]

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        letters = self._letters(task)
        gold = str(task["answer"]).strip().upper()
        if gold not in letters:
            raise ValueError(f"task {task.get('id')!r}: answer {gold!r} is not one of {letters}")
        picked = (extract_answer_letter if self.strict else extract_choice)(response, letters)
        result = StepResult(
            rewards={
                CORRECT: 1.0 if picked == gold else 0.0,
                FORMAT: self.reward.format_weight if picked is not None else 0.0,
            },
            metadata={"extracted": picked},
        )
        return self._shape(result, response)
