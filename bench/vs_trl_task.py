"""The task both systems of ``bench/vs_trl.py`` train on, and the one reward they score with.

``"347 + 8"`` (a < 1000, b in 5..9) answered with the number; the first 200 problems of a seeded
shuffle are held out. The reward is dockyard's math environment's ``score`` in both systems
(TRL's reward function calls :func:`rewards`; dockyard's collector runs ``env.math``). On this
task it is a cheap exact comparison: the environment takes the response's last number and
compares two plain numbers exactly, without math-verify (``dockyard.envs.math.verify``), so a
64-sample step's scoring costs ~1 ms in either system (measured; a response without a number
scores 0 at once).

The long-prompt regime shares a ``prompt_tokens``-token system prompt (the instruction and
worked examples, :func:`long_system_prompt`) across every prompt: the agentic shape, where a
system prompt, tool schemas and context are most of each sequence.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = "Add the numbers."
NUM_HELDOUT = 200


def all_tasks() -> list[dict[str, Any]]:
    """Every problem ``a + b`` with 0 <= a < 1000 and 5 <= b <= 9 (70% need a carry)."""
    return [
        {"id": f"add-{a}-{b}", "problem": f"{a} + {b}", "answer": str(a + b)}
        for a in range(1000)
        for b in range(5, 10)
    ]


def split_tasks(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, heldout)``: the problems shuffled with ``seed``; the first 200 held out.
    ``train`` is in the order both systems train on it."""
    tasks = all_tasks()
    random.Random(seed).shuffle(tasks)
    return tasks[NUM_HELDOUT:], tasks[:NUM_HELDOUT]


def forgot_carry(task: dict[str, Any]) -> str:
    """The slip of the SFT data: the ones digit right, the carry dropped (347 + 8 -> 345)."""
    a, b = (int(x) for x in task["problem"].split(" + "))
    return str(a - a % 10 + (a % 10 + b) % 10)


def long_system_prompt(tokenizer: Any, prompt_tokens: int, seed: int = 0) -> str:
    """:data:`SYSTEM_PROMPT` followed by worked examples (``"412 + 7 = 419"`` lines, seeded),
    as many as keep a chat-templated prompt within ``prompt_tokens`` tokens of ``tokenizer``."""
    rng = random.Random(seed)
    lines = [SYSTEM_PROMPT, "Worked examples:"]
    task = {"problem": "999 + 9"}

    def size(text: str) -> int:
        msgs = [{"role": "system", "content": text}, {"role": "user", "content": task["problem"]}]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    while True:
        a, b = rng.randrange(1000), rng.randrange(5, 10)
        longer = "\n".join([*lines, f"{a} + {b} = {a + b}"])
        if size(longer) > prompt_tokens:
            return "\n".join(lines)
        lines.append(f"{a} + {b} = {a + b}")


_ENVS: dict[str, Any] = {}


def environment(system_prompt: str = SYSTEM_PROMPT) -> Any:
    """The math environment both systems score with (dockyard builds the same one from
    ``env.math``: ``type: math, options: {system_prompt: ...}``)."""
    if system_prompt not in _ENVS:
        from dockyard.envs.math.env import MathEnvironment

        _ENVS[system_prompt] = MathEnvironment(system_prompt=system_prompt)
    return _ENVS[system_prompt]


def prompt(task: dict[str, Any], system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    return environment(system_prompt).prompt(task)


def rewards(tasks: list[dict[str, Any]], responses: list[str]) -> list[float]:
    """The reward of each response: the environment's reward components, summed (dockyard
    sums them with weight 1 each, ``env.<name>.reward_weights`` unset)."""
    env = environment()

    async def score_all() -> list[Any]:
        return await asyncio.gather(
            *(env.score(t, r) for t, r in zip(tasks, responses, strict=True))
        )

    return [float(sum(res.rewards.values())) for res in asyncio.run(score_all())]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
