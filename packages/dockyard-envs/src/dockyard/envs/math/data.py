"""Math data: a seeded arithmetic generator with difficulty levels, and a JSONL loader.

A task is ``{"id": str, "problem": str, "answer": str, ...}``.

Difficulty levels of :class:`ArithmeticGenerator` (all answers are integers, computed exactly):

=====  ===========================================================
1      ``a + b``, single digits
2      ``a ± b``, up to two digits
3      three operands with ``+ - *`` (precedence matters)
4      four operands, ``+ - *`` and one parenthesised group
5      five operands, nested parentheses, exact integer division
=====  ===========================================================
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

_LEVELS = {  # level -> (operands, max operand, operators, parenthesised groups)
    1: (2, 9, "+", 0),
    2: (2, 99, "+-", 0),
    3: (3, 20, "+-*", 0),
    4: (4, 30, "+-*", 1),
    5: (5, 50, "+-*/", 2),
}


class ArithmeticGenerator:
    """``ArithmeticGenerator(seed=0, levels=(1, 2, 3)).tasks(n)``: n reproducible problems.

    The same ``(seed, levels)`` always yields the same sequence; levels cycle in order.
    """

    def __init__(self, seed: int = 0, levels: tuple[int, ...] | list[int] = (1, 2, 3)) -> None:
        bad = [lv for lv in levels if lv not in _LEVELS]
        if bad or not levels:
            raise ValueError(
                f"difficulty levels must be a non-empty subset of 1..5, got {list(levels)}"
            )
        self.seed = seed
        self.levels = tuple(levels)

    def _expr(self, rng: random.Random, level: int) -> tuple[str, Fraction]:
        n_ops, hi, ops, groups = _LEVELS[level]
        while True:
            terms = [str(rng.randint(1, hi)) for _ in range(n_ops)]
            chosen = [rng.choice(ops) for _ in range(n_ops - 1)]
            parts: list[str] = [terms[0]]
            for op, t in zip(chosen, terms[1:], strict=True):
                parts += [op, t]
            spans: set[tuple[int, int]] = set()
            idx = list(range(0, len(parts), 2))
            while len(spans) < groups:  # wrap distinct operand spans in parentheses
                i, j = sorted(rng.sample(idx, 2))
                if (i, j) in spans or (i, j) == (idx[0], idx[-1]):
                    continue
                spans.add((i, j))
                parts[i] = "(" + parts[i]
                parts[j] = parts[j] + ")"
            src = " ".join(parts)
            try:
                exact = re.sub(r"\d+", lambda m: f"F({m.group()})", src)
                # our own digits and operators only; Fraction keeps division exact
                val = Fraction(eval(exact, {"__builtins__": {}, "F": Fraction}, {}))
            except ZeroDivisionError:
                continue
            if val.denominator == 1 and abs(val) < 10**7:
                return src.replace("*", "×").replace("/", "÷"), val

    def task(self, index: int) -> dict[str, Any]:
        rng = random.Random(f"{self.seed}:{index}")
        level = self.levels[index % len(self.levels)]
        expr, value = self._expr(rng, level)
        return {
            "id": f"arith-s{self.seed}-{index}",
            "problem": f"Compute {expr}.",
            "answer": str(value.numerator),
            "difficulty": level,
        }

    def tasks(self, n: int, start: int = 0) -> list[dict[str, Any]]:
        return [self.task(i) for i in range(start, start + n)]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        i = 0
        while True:
            yield self.task(i)
            i += 1


def arithmetic_dataset(split: str, n: int = 512, seed: int = 0) -> list[dict[str, Any]]:
    """The ``arithmetic`` dataset: ``n`` generated problems; ``val`` uses ``seed + 10_000``."""
    return ArithmeticGenerator(seed=seed if split == "train" else seed + 10_000).tasks(n)


def load_math_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read ``problem`` / ``answer`` records (extra keys kept; ``id`` defaults to the line number).

    Raises:
        ValueError: naming the file, line and missing/ill-typed key.
    """
    path = Path(path)
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: each line must be a JSON object")
            for key in ("problem", "answer"):
                if key not in rec:
                    raise ValueError(
                        f"{path}:{lineno}: missing key {key!r} (need 'problem' and 'answer')"
                    )
            if not isinstance(rec["problem"], str):
                raise ValueError(f"{path}:{lineno}: 'problem' must be a string")
            rec["answer"] = str(rec["answer"])
            rec.setdefault("id", f"{path.stem}-{lineno}")
            out.append(rec)
    return out
