"""Expression: write a Python expression that meets a spec — the quickstart's task.

A task is ``{"id", "kind", "size"}``, posed as ``"<kind> of size <n>"`` (for example ``list of
size 12``). The response is one Python expression; the sandbox service evaluates it and a
trusted, held-out test checks the spec:

=========  ==================================================  ==========================
kind       passes when                                         a correct answer
=========  ==================================================  ==========================
list       ``type(v) is list and len(v) == n``                 ``[0]*12``
str        ``type(v) is str and len(v) == n``                  ``'a'*12``
tuple      ``type(v) is tuple and len(v) == n``                ``(0,)*12``
set        ``type(v) is set and len(v) == n``                  ``set(range(12))``
int        ``type(v) is int and v == n``                       ``12``
float      ``type(v) is float and v == n``                     ``float(12)``
=========  ==================================================  ==========================

Rewards: ``reward/tests`` = 1 if the test passes, else 0. A response that is not a single
expression over a small whitelist of names (``list range tuple set str int float len``; no
attribute or dunder access) scores 0 without running: the sandbox is the second wall, not
the first. Sandbox failures are ``infra_error`` (masked by the trainer).

:func:`demonstrations` writes the imperfect SFT data of the quickstart: each kind has correct
templates and *buggy* ones — classic Python slips (``list(range(1, n))`` is one short,
``(0)*n`` is an int, ``{0}*n`` raises, ``str(n)`` has length 1...). A model imitating them
solves roughly the correct fraction; reinforcement learning against the sandbox's verdicts
moves it to the correct templates, and held-out specs (pairs of kind and size never trained
on) measure whether that generalises.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.rewards import TESTS, RewardConfig
from dockyard.envs.sandboxed import SandboxPool, verdict_to_step
from dockyard.sandbox.models import Limits, Task

KINDS = ("list", "str", "tuple", "set", "int", "float")
ALLOWED_NAMES = frozenset({"list", "range", "tuple", "set", "str", "int", "float", "len"})
MAX_EXPRESSION_CHARS = 200

GOOD = {
    "list": ("[0]*{n}", "list(range({n}))"),
    "str": ("'a'*{n}", "'x'*{n}"),
    "tuple": ("(0,)*{n}", "tuple(range({n}))"),
    "set": ("set(range({n}))",),
    "int": ("{n}", "int('{n}')"),
    "float": ("float({n})", "{n}/1"),
}
BUGGY = {
    "list": ("list(range(1,{n}))", "[{n}]"),
    "str": ("str({n})", "'ab'*{n}"),
    "tuple": ("(0)*{n}", "tuple(range(1,{n}))"),
    "set": ("{{0}}*{n}", "set([0]*{n})"),
    "int": ("'{n}'", "{n}+1"),
    "float": ("{n}//1", "float({n}-1)"),
}

_TEST = """\
_type, _len, _int, _float = type, len, int, float
from solution import value


def test_spec():
    v = value()
    assert _type(v) is {typ}, "wrong type"
    {check}
"""


def prompt_text(task: dict[str, Any]) -> str:
    return f"{task['kind']} of size {task['size']}"


def check_expression(expr: str) -> str | None:
    """Why ``expr`` is not an acceptable answer (None when it is)."""
    if not expr or len(expr) > MAX_EXPRESSION_CHARS:
        return "empty or too long"
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return "not a Python expression"
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in ALLOWED_NAMES:
            return f"name {node.id!r} is not allowed"
        if isinstance(node, ast.Attribute | ast.Lambda | ast.NamedExpr | ast.Starred):
            return f"{type(node).__name__} is not allowed"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 64:
            return "string literal too long"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return "** is not allowed"
    return None


def sandbox_task(task: dict[str, Any], expr: str, timeout_s: float = 10.0) -> Task:
    """The sandbox task: ``solution.py`` (untrusted) and the held-out spec test (trusted)."""
    kind, n = task["kind"], int(task["size"])
    if kind in ("int", "float"):
        check = f"assert v == {n}, 'wrong value'"
    else:
        check = f"assert _len(v) == {n}, 'wrong size'"
    return Task(
        files={"solution.py": f"def value():\n    return ({expr})\n"},
        test_files={"test_spec.py": _TEST.format(typ=kind, check=check)},
        tests={"fail_to_pass": ["test_spec.py::test_spec"], "runner": "plain"},
        timeout_s=timeout_s,
        limits=Limits(memory_mb=256, pids=16, cpu_s=5),
        metadata={"task_id": str(task.get("id", ""))},
    )


class ExpressionEnvironment(BaseEnvironment):
    """Single-turn: score one expression through the sandbox service (module docstring).

    Args:
        sandbox_urls: sandbox service URLs (round-robin).
        token: the services' bearer token, if any.
        timeout_s: wall-clock limit of one evaluation.
    """

    name = "expression"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        timeout_s: float = 10.0,
        max_wait_s: float = 120.0,
    ) -> None:
        super().__init__(reward)
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.timeout_s = timeout_s

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": prompt_text(task)}]

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        expr = response.strip()
        why = check_expression(expr)
        if why is not None:
            return StepResult(rewards={TESTS: 0.0}, metadata={"verdict": "rejected", "detail": why})
        result = await self.pool.client().run_task(sandbox_task(task, expr, self.timeout_s))
        return verdict_to_step(result, "binary", task_id=task.get("id"))


def all_tasks(max_size: int = 29) -> list[dict[str, Any]]:
    """Every (kind, size) pair with ``2 <= size <= max_size``."""
    return [{"id": f"{k}-{n}", "kind": k, "size": n} for k in KINDS for n in range(2, max_size + 1)]


def load_tasks(
    split: str = "train", *, num_heldout: int = 32, seed: int = 1234, max_size: int = 29
) -> list[dict[str, Any]]:
    """A fixed split of :func:`all_tasks`: ``num_heldout`` pairs for ``val``, the rest ``train``."""
    if split not in ("train", "val"):
        raise ValueError(f"split={split!r}: expected 'train' or 'val'")
    tasks = all_tasks(max_size)
    random.Random(seed).shuffle(tasks)
    return tasks[:num_heldout] if split == "val" else tasks[num_heldout:]


def demonstration(task: dict[str, Any], rng: random.Random, buggy_fraction: float) -> str:
    """One SFT answer for ``task``: a buggy template with probability ``buggy_fraction``."""
    table = BUGGY if rng.random() < buggy_fraction else GOOD
    return rng.choice(table[task["kind"]]).format(n=task["size"])


def demonstrations(
    tasks: list[dict[str, Any]], n: int, *, buggy_fraction: float = 0.6, seed: int = 0
) -> list[dict[str, Any]]:
    """``n`` chat examples ``{"messages": [user, assistant]}`` drawn from ``tasks``."""
    if not 0.0 <= buggy_fraction <= 1.0:
        raise ValueError(f"buggy_fraction={buggy_fraction}: must be in [0, 1]")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        task = rng.choice(tasks)
        out.append(
            {
                "messages": [
                    {"role": "user", "content": prompt_text(task)},
                    {"role": "assistant", "content": demonstration(task, rng, buggy_fraction)},
                ]
            }
        )
    return out


def is_correct_locally(task: dict[str, Any], expr: str) -> bool:
    """Reference check without the sandbox (tests of the task design only; never a reward)."""
    if check_expression(expr) is not None:
        return False
    safe = {
        k: __builtins__[k] if isinstance(__builtins__, dict) else getattr(__builtins__, k)
        for k in ALLOWED_NAMES
    }
    try:
        v = eval(compile(expr, "<expr>", "eval"), {"__builtins__": safe}, {})
    except Exception:
        return False
    typ = {"list": list, "str": str, "tuple": tuple, "set": set, "int": int, "float": float}
    if type(v) is not typ[task["kind"]]:
        return False
    n = int(task["size"])
    return v == n if task["kind"] in ("int", "float") else len(v) == n
